/* LD_PRELOAD shim for the cgroup v2 tests: shows the process only the
 * "0::" line of /proc/<pid>/cgroup.
 *
 * Why: slurmd's cgroup/v2 plugin refuses to start when /proc/self/cgroup
 * lists cgroup v1 hierarchies too ("Hybrid mode is not supported"). The
 * machines the suite runs on mount the v1 controllers, and a cgroup
 * namespace with a fresh cgroup2 mount still lists them. The tests mount
 * cgroup2 on /sys/fs/cgroup in their own mount namespace and load this
 * shim into slurmd (and so slurmstepd), which then sees a pure v2 node.
 * Test fixture of gpushare; never for production nodes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int is_proc_cgroup(const char *path)
{
	size_t n;

	if (!path || strncmp(path, "/proc/", 6) != 0)
		return 0;
	n = strlen(path);
	return n > 7 && strcmp(path + n - 7, "/cgroup") == 0;
}

/* A memfd holding only the unified lines of the real file, or -1. */
static int unified_copy(int real)
{
	char buf[65536], out[65536];
	size_t len = 0, used = 0;
	ssize_t r;
	char *line, *save = NULL;
	int fd;

	while (len < sizeof(buf) - 1 &&
	       (r = read(real, buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)r;
	close(real);
	buf[len] = '\0';
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		size_t l = strlen(line);
		if (strncmp(line, "0::", 3) != 0 || used + l + 1 > sizeof(out))
			continue;
		memcpy(out + used, line, l);
		out[used + l] = '\n';
		used += l + 1;
	}
	fd = memfd_create("cgroup", MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	if (write(fd, out, used) != (ssize_t)used || lseek(fd, 0, SEEK_SET) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

typedef int (*openat_fn)(int, const char *, int, ...);

static int shim_openat(int dirfd, const char *path, int flags, mode_t mode)
{
	static openat_fn real_openat;
	int fd;

	if (!real_openat)
		real_openat = (openat_fn)dlsym(RTLD_NEXT, "openat");
	fd = real_openat(dirfd, path, flags, mode);
	if (fd < 0 || !is_proc_cgroup(path) || (flags & O_ACCMODE) != O_RDONLY)
		return fd;
	return unified_copy(fd);
}

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = mode_arg(flags, ap);
	va_end(ap);
	return shim_openat(AT_FDCWD, path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = mode_arg(flags, ap);
	va_end(ap);
	return shim_openat(dirfd, path, flags, mode);
}

/* On x86_64 the 64-bit variants are the same calls. */
int open64(const char *path, int flags, ...) __attribute__((alias("open")));
int openat64(int dirfd, const char *path, int flags, ...) __attribute__((alias("openat")));

FILE *fopen(const char *path, const char *how)
{
	static FILE *(*real_fopen)(const char *, const char *);
	int fd;

	if (!real_fopen)
		real_fopen = (FILE * (*)(const char *, const char *))dlsym(RTLD_NEXT, "fopen");
	if (!is_proc_cgroup(path) || strcmp(how, "r") != 0)
		return real_fopen(path, how);
	fd = shim_openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
	return fd < 0 ? NULL : fdopen(fd, "r");
}

FILE *fopen64(const char *path, const char *how)
{
	return fopen(path, how);
}
