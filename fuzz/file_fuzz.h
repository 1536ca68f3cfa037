/* file_fuzz.h: hand a fuzzer's input to a reader that takes a path, via
 * an in-memory file (memfd) named /proc/self/fd/N.
 *
 * One memfd per process, created on the first input and refilled for each
 * (ftruncate + pwrite): creating and closing a memfd per input cost more
 * than the readers themselves. The reader still opens the path afresh for
 * every input (its own open, read and close), so the file path is what is
 * exercised; the refill leaves no bytes of an earlier, longer input behind:
 * the file is cut (or zero-extended) to exactly SIZE, then overwritten. */
#ifndef TD_FUZZ_FILE_FUZZ_H
#define TD_FUZZ_FILE_FUZZ_H

#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* Make the process's memfd hold exactly DATA; its path in PATH. 0, or -1. */
static int
fuzz_file(const uint8_t *data, size_t size, char *path, size_t cap)
{
    static int fd = -1;

    if (fd < 0) {
        fd = memfd_create("fuzz", 0);
        if (fd < 0) {
            return -1;
        }
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        return -1;
    }
    if (size > 0 && pwrite(fd, data, size, 0) != (ssize_t)size) {
        return -1;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return 0;
}

#endif
