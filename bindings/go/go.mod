module github.com/accel-dev/accel/bindings/go

go 1.19
