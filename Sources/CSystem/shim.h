// The few glibc calls Swift's Glibc module does not export, as small typed wrappers.
#ifndef FERRY_CSYSTEM_SHIM_H
#define FERRY_CSYSTEM_SHIM_H
#include <malloc.h>
#include <spawn.h>
#include <sys/prctl.h>

// glibc 2.34+ declares it only under _GNU_SOURCE, which would change other headers' structs for
// this module alone: declared here as glibc does.
extern int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *actions, int from);

/// A spawned child closes every descriptor from `lowest` up before it runs, so it holds nothing of
/// its parent's but what the other file actions give it.
static inline int ferry_spawn_close_from(posix_spawn_file_actions_t *actions, int lowest) {
    return posix_spawn_file_actions_addclosefrom_np(actions, lowest);
}

// Declared by glibc only under _GNU_SOURCE (see above): declared here as glibc does.
extern int syncfs(int fd);
extern int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags);

extern int memfd_create(const char *name, unsigned int flags);

/// An anonymous file in memory, closed on exec: the bytes of a piece stored compressed, sent
/// through a remote's usual placement of a range of a file.
static inline int ferry_memory_file(const char *name) { return memfd_create(name, 1u /* MFD_CLOEXEC */); }

/// Flushes the filesystem holding `fd` to disk: many files, one call.
static inline int ferry_syncfs(int fd) { return syncfs(fd); }

/// Swaps two names atomically (`RENAME_EXCHANGE`): both exist before and after; -1 with errno
/// EINVAL where the filesystem cannot.
static inline int ferry_rename_exchange(int olddirfd, const char *oldpath, int newdirfd, const char *newpath) {
    return renameat2(olddirfd, oldpath, newdirfd, newpath, 1u << 1);
}

/// Names the calling thread (15 bytes at most; longer is cut by the kernel): what top -H and
/// /proc/PID/task/TID/comm show.
static inline int ferry_name_thread(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0);
}

/// Whether the process may dump core, or be traced or read through /proc by its user (prctl).
static inline int ferry_set_dumpable(int dumpable) {
    return prctl(PR_SET_DUMPABLE, (unsigned long)dumpable, 0, 0, 0);
}

static inline int ferry_get_dumpable(void) {
    return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
}
/// Gives the memory glibc keeps free in its arenas back to the system: after a cycle, the
/// threads that ran it leave their per-thread arenas full of freed blocks that otherwise stay
/// resident (an agent grew from 27 to 118 MB over 10 minutes of change cycles).
static inline int ferry_release_free_memory(void) { return malloc_trim(0); }

/// Caps the arenas glibc's malloc keeps (by default a thread that meets contention gets one of its
/// own, up to 8 per CPU): see `Agent.init`.
static inline int ferry_limit_arenas(int count) { return mallopt(M_ARENA_MAX, count); }

#endif
