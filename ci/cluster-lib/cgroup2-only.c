/*
 * LD_PRELOAD for the slurmds of a test cluster on a pure cgroup v2 host of their own
 * (CGROUP_V2, ci/cluster-lib/node-start.sh): a process's own /proc/self/cgroup shows its
 * unified-hierarchy line alone (`0::PATH`), as on a host with no v1 hierarchy.
 *
 * Why: this machine's kernel has v1 hierarchies (the controllers are bound to them), and
 * /proc/PID/cgroup lists them to every process whatever its namespaces. Slurm's cgroup/v2
 * reads the caller's own file (`/proc/self/cgroup`, in slurmd and in every slurmstepd:
 * `_get_self_cg_path()` in 22.05, `_get_proc_cg_path("self")` in 26.05) and stops at a
 * first line that is not `0::`: "fatal: Hybrid mode is not supported". Only that path is
 * changed: a file read by pid (`/proc/123/cgroup`, which the plugins under test read)
 * stays the kernel's, and the v2 line kept is the kernel's own.
 *
 * Built by `cluster up` (tests/src/cluster/ops/up.rs): cc -shared -fPIC -o X.so X.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int is_self_cgroup(const char *path)
{
	return path && (!strcmp(path, "/proc/self/cgroup") ||
			!strcmp(path, "/proc/thread-self/cgroup"));
}

/* An in-memory file with the `0::` line of `fd`'s text; -1 (errno set) on failure. */
static int v2_line_only(int fd)
{
	char buf[8192], *line, *end;
	ssize_t n, got = 0;
	int out;

	while (got < (ssize_t)sizeof(buf) - 1 &&
	       (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
		got += n;
	close(fd);
	buf[got] = '\0';
	out = memfd_create("cgroup2-only", MFD_CLOEXEC);
	if (out < 0)
		return -1;
	for (line = buf; line && *line; line = end ? end + 1 : NULL) {
		end = strchr(line, '\n');
		if (!strncmp(line, "0::", 3)) {
			size_t len = end ? (size_t)(end - line + 1) : strlen(line);
			if (write(out, line, len) != (ssize_t)len) {
				close(out);
				return -1;
			}
		}
	}
	lseek(out, 0, SEEK_SET);
	return out;
}

#define WRAP_OPEN(name, args, call)                                             \
	int name args                                                           \
	{                                                                       \
		static int (*real) ();                                          \
		mode_t mode = 0;                                                \
		int fd;                                                         \
		if (flags & (O_CREAT | O_TMPFILE)) {                            \
			va_list ap;                                             \
			va_start(ap, flags);                                    \
			mode = va_arg(ap, mode_t);                              \
			va_end(ap);                                             \
		}                                                               \
		if (!real)                                                      \
			real = dlsym(RTLD_NEXT, #name);                         \
		fd = real call;                                                 \
		if (fd < 0 || !is_self_cgroup(path))                            \
			return fd;                                              \
		return v2_line_only(fd);                                        \
	}

WRAP_OPEN(open, (const char *path, int flags, ...), (path, flags, mode))
WRAP_OPEN(open64, (const char *path, int flags, ...), (path, flags, mode))
WRAP_OPEN(openat, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, mode))
WRAP_OPEN(openat64, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, mode))
