/* file_fuzz.h: hand a fuzzer's input to a reader that takes a path, via
 * an in-memory file (memfd) named /proc/self/fd/N. */
#ifndef TD_FUZZ_FILE_FUZZ_H
#define TD_FUZZ_FILE_FUZZ_H

#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* Write DATA to a fresh memfd; its path in PATH. The fd, or -1. */
static int
fuzz_file(const uint8_t *data, size_t size, char *path, size_t cap)
{
    int fd = memfd_create("fuzz", 0);

    if (fd < 0) {
        return -1;
    }
    if (size > 0 && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return -1;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
