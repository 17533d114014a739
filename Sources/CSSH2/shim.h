#include <libssh2.h>

/* Function-like macros of libssh2.h, which Swift does not import: the calls ferry's SSH
   transport makes, as plain functions. Only the session and channel layers are used; SFTP's
   packets are ferry's own (Remote/SFTP). */
static inline LIBSSH2_SESSION *ferry_ssh_session_init(void) { return libssh2_session_init(); }
static inline LIBSSH2_CHANNEL *ferry_ssh_channel_open_session(LIBSSH2_SESSION *s) { return libssh2_channel_open_session(s); }
static inline int ferry_ssh_channel_subsystem(LIBSSH2_CHANNEL *c, const char *name) { return libssh2_channel_subsystem(c, name); }
static inline ssize_t ferry_ssh_channel_read(LIBSSH2_CHANNEL *c, char *buffer, size_t count) { return libssh2_channel_read(c, buffer, count); }
static inline ssize_t ferry_ssh_channel_write(LIBSSH2_CHANNEL *c, const char *buffer, size_t count) { return libssh2_channel_write(c, buffer, count); }
static inline int ferry_ssh_userauth_publickey_fromfile(LIBSSH2_SESSION *s, const char *user, const char *key) {
    return libssh2_userauth_publickey_fromfile(s, user, NULL, key, NULL);
}
static inline int ferry_ssh_session_disconnect(LIBSSH2_SESSION *s, const char *why) { return libssh2_session_disconnect(s, why); }
