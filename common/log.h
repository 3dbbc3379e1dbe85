/*
 * The log line of a2's programs: "<program>: <text>\n" on stderr, written
 * with one write(2) so that the lines of threads and of child processes
 * sharing stderr never interleave. Internal (liba2common, not installed).
 */
#ifndef A2_COMMON_LOG_H
#define A2_COMMON_LOG_H

#include <stdarg.h>

/* Longest line written, newline included; a longer text is cut. */
#define A2__LOG_MAX 2048

/* Writes one line: program (NULL: none, the text carries its own prefix),
 * then the formatted text. */
__attribute__((format(printf, 2, 3))) void a2__log(const char *program,
                                                   const char *fmt, ...);
__attribute__((format(printf, 2, 0))) void
a2__log_v(const char *program, const char *fmt, va_list ap);

#endif
