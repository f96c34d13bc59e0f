//go:build race

package accel

// raceEnabled: the tests run under the race detector (go test -race).
const raceEnabled = true
