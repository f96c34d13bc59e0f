/* Shared by the cgo preambles of package accel. Functions that take no context record
 * their error message in a THREAD-LOCAL slot (accel_last_error(NULL)); a goroutine may
 * move to another OS thread between two cgo calls, so the binding never reads that slot
 * in a second call: each such function is called through a small C wrapper in a preamble
 * that makes the call and, on failure, copies the message in the same C call, on the
 * same thread (ag_fail below). Go frees the copy. */
#ifndef ACCEL_GO_SHIM_H
#define ACCEL_GO_SHIM_H
#include <stdlib.h>
#include <string.h>
#include <accel/accel.h>

typedef struct ag_res {
    accel_status status;
    char *msg; /* malloc'ed copy of accel_last_error(NULL) on failure, else NULL */
} ag_res;

static inline ag_res ag_fail(accel_status st) {
    ag_res r;
    r.status = st;
    r.msg = NULL;
    if (st != ACCEL_OK) {
        const char *m = accel_last_error(NULL);
        r.msg = strdup(m ? m : "");
    }
    return r;
}
#endif
