/*
 * Clocks, pseudo-random bytes, sleeping, whole reads and writes, CPU time,
 * threads by name, a free loopback port (see util.h).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "support/util.h"

uint64_t
ts_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double
ts_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t
ts_xorshift64(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

void
ts_fill_nonzero(void *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    unsigned char *p = buf;
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(ts_xorshift64(&x) % 255 + 1);
}

int
ts_all_bytes_are(const void *buf, size_t len, unsigned char v)
{
    const unsigned char *p = buf;
    for (size_t i = 0; i < len; i++)
        if (p[i] != v)
            return 0;
    return 1;
}

unsigned char *
ts_xmalloc(size_t len)
{
    unsigned char *p = malloc(len);
    CHECK(p != NULL);
    return p;
}

void
ts_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int
ts_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

void
ts_write_all(int fd, const void *buf, size_t len)
{
    CHECK_MSG(write(fd, buf, len) == (ssize_t)len, "write: %s", strerror(errno));
}

void
ts_read_all(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        CHECK_MSG(n > 0, "read: %s", n == 0 ? "end of file" : strerror(errno));
        got += (size_t)n;
    }
}

double
ts_cpu_seconds(pid_t pid)
{
    char path[64], buf[2048];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold anything */
    CHECK(p != NULL);
    unsigned long long utime = 0, stime = 0;
    /* The first field after ')' is field 3. */
    CHECK(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) ==
          2);
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

unsigned
ts_threads_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    unsigned n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        char path[300], comm[64] = "";
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
        FILE *f = de->d_name[0] != '.' ? fopen(path, "r") : NULL;
        if (f == NULL)
            continue; /* "." and "..", or a thread that ended meanwhile */
        if (fgets(comm, sizeof(comm), f) != NULL)
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
        n += strcmp(comm, name) == 0;
    }
    closedir(d);
    return n;
}

unsigned
ts_free_loopback_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
          getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}
