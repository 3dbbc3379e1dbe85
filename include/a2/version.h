/*
 * a2's release version. The programs print it with --version; the installed
 * pkg-config files (a2store.pc, a2worker.pc) take it from here.
 */
#ifndef A2_VERSION_H
#define A2_VERSION_H

#define A2_VERSION "0.1.0"

#endif
