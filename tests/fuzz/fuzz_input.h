/*
 * The input of the socket fuzz targets (consumer/fuzz_server.c,
 * worker/fuzz_worker.c): one control byte, its low bits flags of the
 * target's, the bits above them the chunk size the rest of the input is
 * written in (0: all of it at once); then the bytes to send.
 */
#ifndef A2_FUZZ_INPUT_H
#define A2_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

/*
 * Takes the control byte off the input (*data and *size then hold the
 * bytes to send) and returns it, -1 when the input is empty; *chunk is the
 * chunk size from the bits above the low flag_bits (at least 1).
 */
static inline int fuzz_take_control(const uint8_t **data, size_t *size,
                                    unsigned flag_bits, size_t *chunk)
{
    if (*size < 1)
        return -1;
    unsigned ctl = (*data)[0];
    (*data)++;
    (*size)--;
    *chunk = ctl >> flag_bits;
    if (*chunk == 0)
        *chunk = *size ? *size : 1;
    return (int)ctl;
}

#endif
