package accel

/*
#include <stdint.h>
#include <accel/accel.h>
*/
import "C"

import "runtime/cgo"

// accelGoRank is the rank function accel_sim_run calls (through sim.go's C trampoline) on
// each rank's thread. user is the runtime/cgo.Handle of the run. (This file's preamble may
// only declare: it carries an //export.)
//
//export accelGoRank
func accelGoRank(ctx *C.accel_context, user C.uintptr_t) C.accel_status {
	return cgo.Handle(user).Value().(*simRun).runRank(ctx)
}
