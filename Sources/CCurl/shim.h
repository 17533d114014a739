#include <curl/curl.h>

/* curl_easy_setopt, curl_easy_getinfo and curl_multi_setopt are C-variadic, which Swift cannot call.
   These typed wrappers are the only way ferry sets options. */
static inline CURLcode ferry_easy_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ferry_easy_setopt_offt(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ferry_easy_setopt_string(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ferry_easy_setopt_pointer(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ferry_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }

typedef size_t (*ferry_data_callback)(char *ptr, size_t size, size_t nmemb, void *userdata);
static inline CURLcode ferry_easy_setopt_datacb(CURL *h, CURLoption o, ferry_data_callback cb) { return curl_easy_setopt(h, o, cb); }

typedef int (*ferry_xferinfo_callback)(void *clientp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow);
static inline CURLcode ferry_easy_setopt_xferinfo(CURL *h, ferry_xferinfo_callback cb) { return curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, cb); }

static inline CURLcode ferry_easy_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode ferry_easy_getinfo_offt(CURL *h, CURLINFO i, curl_off_t *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode ferry_easy_getinfo_pointer(CURL *h, CURLINFO i, void **v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode ferry_easy_getinfo_string(CURL *h, CURLINFO i, char **v) { return curl_easy_getinfo(h, i, v); }

static inline CURLMcode ferry_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }

/* CURLMsg has a union; reach its fields from C. */
static inline CURL *ferry_msg_easy(CURLMsg *m) { return m->easy_handle; }
static inline int ferry_msg_is_done(CURLMsg *m) { return m->msg == CURLMSG_DONE; }
static inline CURLcode ferry_msg_result(CURLMsg *m) { return m->data.result; }

/* The schemes a request may use, and those a redirect of it may lead to (only https from an
   https request: `plainRedirects` 0), as the bit masks libcurl checks. The _STR options that
   replace them parse their text against every scheme libcurl knows, on each request: about
   3,700 instructions a request for two short lists. The masks are deprecated, not removed. */
static inline CURLcode ferry_easy_allow_schemes(CURL *h, int plainRedirects) {
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
    long web = (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS);
    CURLcode c = curl_easy_setopt(h, CURLOPT_PROTOCOLS, web);
    if (c == CURLE_OK) c = curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS, plainRedirects ? web : (long)CURLPROTO_HTTPS);
#pragma clang diagnostic pop
    return c;
}

/* Macros with casts that Swift does not import. */
static inline long ferry_auth_basic(void) { return (long)CURLAUTH_BASIC; }
static inline long ferry_auth_bearer(void) { return (long)CURLAUTH_BEARER; }
