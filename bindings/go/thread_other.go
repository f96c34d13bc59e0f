//go:build !linux

package accel

/*
#include <pthread.h>
#include <stdint.h>
static uint64_t ag_thread_id(void) { return (uint64_t)(uintptr_t)pthread_self(); }
*/
import "C"

// osThreadID identifies the calling OS thread.
func osThreadID() int64 { return int64(C.ag_thread_id()) }
