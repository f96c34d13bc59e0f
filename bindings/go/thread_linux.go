//go:build linux

package accel

import "syscall"

// osThreadID identifies the calling OS thread (gettid: a raw system call, no cgo call).
func osThreadID() int64 { return int64(syscall.Gettid()) }
