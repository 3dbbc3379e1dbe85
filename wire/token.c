/*
 * The token file of a TCP connection, read as libpq reads a password file:
 * a regular file that only its owner can read (or, owned by root, its group
 * too), holding one line of printable UTF-8 text.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "a2/wire.h"

#define TOKEN_MAX 4096

__attribute__((format(printf, 3, 4))) static char *
nope(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return NULL;
}

char *a2_wire_read_token(const char *path, char *err, size_t errlen)
{
    struct stat st;
    char buf[TOKEN_MAX + 2];
    size_t n = 0;

    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return nope(err, errlen, "could not open token file \"%s\": %s", path,
                    strerror(errno));
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return nope(err, errlen, "could not stat token file \"%s\": %s",
                    path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return nope(err, errlen, "token file \"%s\" is %s", path,
                    S_ISDIR(st.st_mode) ? "a directory"
                                        : "not a regular file");
    }
    mode_t others = st.st_mode & (S_IRWXG | S_IRWXO);
    int root_group = st.st_uid == 0 && (others & ~(mode_t)S_IRGRP) == 0;
    if (others && !root_group) {
        close(fd);
        return nope(err, errlen,
                    "token file \"%s\" has group or world access (mode %04o): "
                    "it must be u=rw (0600) or less, or 0640 owned by root",
                    path, (unsigned)(st.st_mode & 07777));
    }
    for (;;) {
        ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return nope(err, errlen, "could not read token file \"%s\": %s",
                        path, strerror(e));
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n == sizeof buf - 1)
            break;
    }
    close(fd);
    buf[n] = '\0';
    /* one line: a final newline (CRLF too) and trailing blanks go */
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
                     buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        buf[--n] = '\0';
    if (n > TOKEN_MAX)
        return nope(err, errlen, "token file \"%s\" is longer than %d bytes",
                    path, TOKEN_MAX);
    if (n == 0)
        return nope(err, errlen, "token file \"%s\" is empty", path);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
            return nope(err, errlen,
                        "token file \"%s\" holds a control character or more "
                        "than one line",
                        path);
    if (!a2_wire_utf8_valid(buf, n))
        return nope(err, errlen, "token file \"%s\" is not UTF-8 text", path);
    char *t = strdup(buf);
    if (!t)
        return nope(err, errlen, "out of memory");
    return t;
}
