/*
 * a2's release version. The programs print it with --version; the installed
 * pkg-config files (a2store.pc, a2worker.pc) take it from here.
 */
#ifndef A2_VERSION_H
#define A2_VERSION_H

#include "a2/schema.h"
#include "a2/wire.h"

#define A2_VERSION "0.1.0"

#define A2__VERSION_STR(x)  #x
#define A2__VERSION_XSTR(x) A2__VERSION_STR(x)

/* What --version prints after the program's name: the release and the
 * schema and wire protocol versions it speaks. */
#define A2_VERSION_LINE                                                        \
    A2_VERSION " (schema " A2_SCHEMA_VERSION                                   \
               ", wire protocol " A2__VERSION_XSTR(A2_WIRE_VERSION) ")"

#endif
