import CCrypto
import CCurl
import Glibc
import Synchronization
import FerryCore

/// libcurl's process-wide setup. `curl_global_init` must run before any other thread starts, so
/// the executable calls `Curl.initialize()` first thing. OpenSSL (libcurl's, libssh2's and ferry's
/// own hashing) is told first not to clean itself up at exit: the process may exit while a
/// session's thread still frees an SSH connection's ciphers, and OpenSSL's exit handler freeing
/// its state under that thread corrupted the heap (a loaded run aborted in malloc after a pull).
public enum Curl {
    nonisolated(unsafe) private static var initialized = false

    public static func initialize() {
        if !initialized {
            _ = OPENSSL_init_crypto(UInt64(OPENSSL_INIT_NO_ATEXIT), nil)
            curl_global_init(Int(CURL_GLOBAL_DEFAULT))
            initialized = true
        }
    }

    /// What went wrong, in words: libcurl's error text where it has one. A response header too
    /// large for libcurl (100 KiB, from a hostile or broken server) is named as such, not as the
    /// "Out of memory" libcurl reports for it.
    static func describe(_ code: CURLcode, errorText: String?, headers: ResponseHeaders) -> String {
        if isHeaderTooLarge(code, errorText: errorText, headers: headers) {
            return "the server sent a response header larger than libcurl accepts (100 KiB); refused"
        }
        if isPlainHTTPPort(code, errorText: errorText) {
            return "the TLS handshake got a plain HTTP answer (\(errorText ?? "wrong version number")): this port speaks http://, not https://"
        }
        if code == CURLE_ABORTED_BY_CALLBACK {
            return "the request was abandoned because the run is stopping"
        }
        if let target = refusedRedirect(code, headers: headers) {
            return "the server redirected (HTTP \(headers.status)) to \(target), which is not https://: an https:// remote never follows a redirect "
                + "to a weaker scheme, so nothing was read from there; fix the redirect on the server, or name the URL the files are served from over https:// in 'remote ='"
        }
        return errorText ?? String(cString: curl_easy_strerror(code))
    }

    /// An `https://` URL to a port that speaks plain HTTP: OpenSSL reads the server's HTTP answer
    /// as a TLS record ("wrong version number"). Trying again cannot help.
    static func isPlainHTTPPort(_ code: CURLcode, errorText: String?) -> Bool {
        guard code == CURLE_SSL_CONNECT_ERROR, let text = errorText?.lowercased() else { return false }
        return text.contains("wrong version number") || text.contains("packet length too long") || text.contains("http request")
    }

    /// Where a redirect that libcurl refused to follow pointed (`isHTTPS`: an `https://`
    /// request sent to `http://` or another scheme), shortened and printable; nil for any other failure.
    static func refusedRedirect(_ code: CURLcode, headers: ResponseHeaders) -> String? {
        guard code == CURLE_UNSUPPORTED_PROTOCOL, (300..<400).contains(headers.status), let location = headers.location else { return nil }
        return Printable.name(String(location.prefix(300)))
    }

    /// The URL's scheme is `https`. A redirect of such a request may lead to `https://` only (a
    /// redirect to plain HTTP would hand the session's bytes, and what it prints as their source,
    /// to anyone on the path); from `http://`, to either (`EasyHandle.configure`).
    static func isHTTPS(_ url: String) -> Bool {
        var utf8 = url.utf8.makeIterator()
        for expected in "https:".utf8 {
            guard let byte = utf8.next(), (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte + 32 == expected
                                                                                             : byte == expected else { return false }
        }
        return true
    }

    /// A hint for a failure a mistaken scheme explains, or nil.
    static func schemeHint(_ code: CURLcode, errorText: String?, status: Int?, body: [UInt8], url: String) -> String? {
        if isPlainHTTPPort(code, errorText: errorText) {
            return "the server speaks plain HTTP on this port: use http:// in 'remote =', or the port where it speaks TLS"
        }
        if status == 400 && url.hasPrefix("http://") {
            let text = String(decoding: body.prefix(2048), as: UTF8.self).lowercased()
            if text.contains("plain http") || text.contains("https port") || text.contains("ssl-enabled") || text.contains("tls") {
                return "the server expects TLS on this port (it says so): use https:// in 'remote ='"
            }
            return "if the server expects TLS on this port, use https:// in 'remote ='"
        }
        return nil
    }

    /// libcurl before 8.6 answers an oversized header with CURLE_OUT_OF_MEMORY (8.6 and later with
    /// CURLE_TOO_LARGE, 100), usually without error text: a response whose headers never ended.
    static func isHeaderTooLarge(_ code: CURLcode, errorText: String?, headers: ResponseHeaders) -> Bool {
        guard code == CURLE_OUT_OF_MEMORY || code.rawValue == 100 else { return false }
        return !headers.complete || (errorText.map { $0.lowercased().contains("header") } ?? false)
    }

    /// Why a transfer that ended with `code` failed, for the retry rules (`FailureCause.retryClass`).
    static func cause(_ code: CURLcode, errorText: String?, headers: ResponseHeaders) -> FailureCause {
        if isHeaderTooLarge(code, errorText: errorText, headers: headers) || isPlainHTTPPort(code, errorText: errorText)
            || refusedRedirect(code, headers: headers) != nil { return .unusable }
        return .network(curlCode: Int32(code.rawValue))
    }
}

/// What every request of a session shares: TLS trust, credentials, timeouts. Credentials are read
/// from their files once per run and never appear in any message.
public struct HTTPSettings: Sendable {
    public var caFile: String?
    public var basicAuth: String?
    public var bearerToken: String?
    public var connectTimeout: Double
    public var minSpeed: Int64
    public var stallTimeout: Double
    /// The run's stop (its deadline, a signal): a request made one by one on the run's thread
    /// (`Exchange`: a manifest, a WebDAV or S3 step) is abandoned the moment it says stop, so a
    /// server that never finishes an answer cannot hold a run past `--max-duration` or a SIGTERM.
    /// The engine's transfers stop by the engine's own rule instead.
    public var stop: StopCondition?
    /// The source these requests are for, in a pull with mirrors: each request's first byte is
    /// recorded there, and a patient source's requests wait `FirstBytes.patience`, not the
    /// session's timeouts.
    public var meter: FirstBytes.Meter?
    public static let userAgent = "ferry/\(FerryVersion.string)"

    public init(session: SessionConfig, basicAuth: String?, bearerToken: String?) {
        caFile = session.caFile
        self.basicAuth = basicAuth
        self.bearerToken = bearerToken
        connectTimeout = session.connectTimeout
        minSpeed = session.minSpeed
        stallTimeout = session.stallTimeout
    }

    /// The settings of a request that is not the session's own (a source of S3 credentials): the
    /// system's CAs, no credentials, and no speed limit (its caller bounds the time it takes).
    init(connectTimeout: Double) {
        self.connectTimeout = connectTimeout
        minSpeed = 0
        stallTimeout = 0
    }
}

public enum FerryVersion {
    public static let string = "0.1.0"
}

/// The headers of the final response (redirect responses are forgotten as the next status line
/// arrives).
struct ResponseHeaders {
    var status = 0
    var reason = ""
    var etag: String?
    var lastModified: String?
    var contentRange: String?
    var contentType: String?
    var contentLength: Int64?
    var retryAfter: String?
    var date: String?
    /// Where a redirect points: read only to name a redirect that was refused (`Curl.refusedRedirect`).
    var location: String?
    /// RFC 9530 and RFC 3230 digests of the representation (asked for with `Want-Repr-Digest`).
    var reprDigest: String?
    var digest: String?
    /// Headers whose names start with `x-` (lowercased names): a store's own (S3's checksums and
    /// metadata). Few servers send any.
    var extensions: [String: String] = [:]
    /// True once the blank line after the final response's headers arrived.
    private(set) var complete = false
    /// True before the first line and after each blank line: only then does `HTTP/` start a status line.
    private var atStatusLine = true

    /// Takes one header line as libcurl delivers it. Works on bytes: only the few headers ferry
    /// reads become Strings (this runs for every response of a 10,000-file sync).
    mutating func consume(_ line: UnsafeBufferPointer<UInt8>) {
        var end = line.count
        while end > 0 && (line[end - 1] == 0x0A || line[end - 1] == 0x0D) { end -= 1 }
        guard end > 0 else {
            atStatusLine = true
            complete = status != 0
            return
        }
        let bytes = UnsafeBufferPointer(rebasing: line[0..<end])
        if atStatusLine && ResponseHeaders.hasPrefix(bytes, "HTTP/") {
            self = ResponseHeaders()
            atStatusLine = false
            var i = 5
            while i < bytes.count && bytes[i] != 0x20 { i += 1 }
            i += 1
            var code = 0
            var digits = 0
            while i < bytes.count, bytes[i] >= 48, bytes[i] <= 57, digits < 3 {
                code = code * 10 + Int(bytes[i] - 48)
                i += 1
                digits += 1
            }
            status = code
            // The reason phrase is the server's own text: kept short (it goes into messages).
            if i < bytes.count { reason = String(decoding: UnsafeBufferPointer(rebasing: bytes[(i + 1)..<min(bytes.count, i + 1 + 120)]), as: UTF8.self) }
            return
        }
        func value(after nameLength: Int) -> String {
            var start = nameLength
            while start < bytes.count && (bytes[start] == 0x20 || bytes[start] == 0x09) { start += 1 }
            return String(decoding: UnsafeBufferPointer(rebasing: bytes[start...]), as: UTF8.self)
        }
        if ResponseHeaders.hasPrefix(bytes, "etag:") {
            etag = value(after: 5)
        } else if ResponseHeaders.hasPrefix(bytes, "last-modified:") {
            lastModified = value(after: 14)
        } else if ResponseHeaders.hasPrefix(bytes, "content-range:") {
            contentRange = value(after: 14)
        } else if ResponseHeaders.hasPrefix(bytes, "content-type:") {
            contentType = value(after: 13)
        } else if ResponseHeaders.hasPrefix(bytes, "content-length:") {
            contentLength = Int64(value(after: 15))
        } else if ResponseHeaders.hasPrefix(bytes, "retry-after:") {
            retryAfter = value(after: 12)
        } else if ResponseHeaders.hasPrefix(bytes, "date:") {
            date = value(after: 5)
        } else if ResponseHeaders.hasPrefix(bytes, "location:") {
            location = value(after: 9)
        } else if ResponseHeaders.hasPrefix(bytes, "repr-digest:") {
            reprDigest = value(after: 12)
        } else if ResponseHeaders.hasPrefix(bytes, "digest:") {
            digest = value(after: 7)
        } else if ResponseHeaders.hasPrefix(bytes, "x-"), let colon = bytes.firstIndex(of: UInt8(ascii: ":")) {
            extensions[String(decoding: UnsafeBufferPointer(rebasing: bytes[..<colon]), as: UTF8.self).lowercased()] = value(after: colon + 1)
        }
    }

    /// Case-insensitive ASCII prefix test.
    private static func hasPrefix(_ bytes: UnsafeBufferPointer<UInt8>, _ prefix: StaticString) -> Bool {
        let n = prefix.utf8CodeUnitCount
        guard bytes.count >= n else { return false }
        let p = prefix.utf8Start
        func lower(_ c: UInt8) -> UInt8 { c >= 65 && c <= 90 ? c + 32 : c }
        for i in 0..<n where lower(bytes[i]) != lower(p[i]) { return false }
        return true
    }

    /// The validator to resume under (`If-Range`, `If-Match`): a strong ETag, else Last-Modified.
    /// Weak ETags (`W/"…"`) never validate a range (RFC 9110 §13.1.5), and neither does anything
    /// from a response whose validators do not hold (`validatorsHold`): resuming under them could
    /// splice two versions of a file changed within one second (the hash check would catch it, at
    /// the cost of fetching the file again) — unless the remote derives its ETags from the content
    /// (`contentETags`, S3), which then hold whenever the object was written.
    func rangeValidator(contentETags: Bool) -> String? {
        let strong = etag.flatMap { $0.hasPrefix("\"") ? $0 : nil }
        if contentETags, let strong { return strong }
        guard validatorsHold else { return nil }
        return strong ?? lastModified
    }

    /// Whether this response's ETag and Last-Modified may stand for its body later (`ResponsePolicy.validatorsHold`).
    var validatorsHold: Bool {
        ResponsePolicy.validatorsHold(lastModified: lastModified.flatMap(Timestamp.init(httpDate:)), hasLastModified: lastModified != nil,
                                      date: date.flatMap(Timestamp.init(httpDate:)))
    }

    /// `Retry-After`: a number of seconds or an HTTP-date (RFC 9110 §10.2.3).
    static func parseRetryAfter(_ value: String) -> RetryAfter? {
        if let seconds = Double(value.trimmingSpaces()), seconds >= 0 { return .seconds(seconds) }
        return Timestamp(httpDate: value).map(RetryAfter.date)
    }
}

/// A server's `Retry-After`: seconds to wait, or the time to wait for (counted from when the
/// failure is decided on, on the run's clock).
enum RetryAfter {
    case seconds(Double)
    case date(Timestamp)

    func seconds(from now: Timestamp) -> Double {
        switch self {
        case .seconds(let seconds): return seconds
        case .date(let date): return max(0, date.timeInterval - now.timeInterval)
        }
    }
}

/// One libcurl easy handle, configured for a session's settings. Used by one thread at a time
/// (handed between threads only through `borrow`'s pool, under its lock).
final class EasyHandle: @unchecked Sendable {
    /// Handles no request uses now, with the connections libcurl keeps alive in them: requests
    /// made one by one (a manifest, its metadata objects, S3 steps) reuse a connection instead of
    /// opening one each, on whatever thread they run.
    private static let idle = Mutex<[EasyHandle]>([])
    private static let keptIdle = 16

    /// Runs `body` with a handle from the pool (or a new one), which goes back afterwards.
    static func borrow<T, E: Error>(_ body: (EasyHandle) throws(E) -> T) throws(E) -> T {
        let easy = idle.withLock { $0.popLast() } ?? EasyHandle()
        defer { idle.withLock { if $0.count < keptIdle { $0.append(easy) } } }
        return try body(easy)
    }

    let handle: UnsafeMutableRawPointer
    let errorBuffer: UnsafeMutablePointer<CChar>
    private var headerList: UnsafeMutablePointer<curl_slist>?
    /// Where the first byte of the request configured last is recorded (`recordFirstByte`).
    private var meter: FirstBytes.Meter?

    init() {
        handle = curl_easy_init()
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
    }

    deinit {
        curl_easy_cleanup(handle)
        if let headerList { curl_slist_free_all(headerList) }
        errorBuffer.deallocate()
    }

    func set(_ option: CURLoption, _ value: Int) { ferry_easy_setopt_long(handle, option, value) }
    func set(_ option: CURLoption, _ value: String) { ferry_easy_setopt_string(handle, option, value) }
    func set(_ option: CURLoption, pointer: UnsafeMutableRawPointer?) { ferry_easy_setopt_pointer(handle, option, pointer) }

    /// Resets the handle (keeping its connection cache) and applies the session's settings.
    func configure(url: String, settings: HTTPSettings, extraHeaders: [String] = []) {
        curl_easy_reset(handle)
        errorBuffer.pointee = 0
        set(CURLOPT_ERRORBUFFER, pointer: UnsafeMutableRawPointer(errorBuffer))
        set(CURLOPT_URL, url)
        set(CURLOPT_NOSIGNAL, 1)
        set(CURLOPT_USERAGENT, HTTPSettings.userAgent)
        // HTTP(S) only: a file:// remote never reaches libcurl (FileRemote).
        let secure = Curl.isHTTPS(url)
        ferry_easy_allow_schemes(handle, secure ? 0 : 1)
        set(CURLOPT_FOLLOWLOCATION, 1)
        set(CURLOPT_MAXREDIRS, 10)
        // Credentials go to the configured host only, never to a host a redirect names.
        set(CURLOPT_UNRESTRICTED_AUTH, 0)
        set(CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS))
        // Over HTTPS a transfer waits for a connection being set up that may multiplex (HTTP/2)
        // rather than opening its own: one TLS handshake instead of one per transfer. Plain HTTP
        // is HTTP/1.1 here, where waiting would only serialize the transfers.
        set(CURLOPT_PIPEWAIT, secure ? 1 : 0)
        set(CURLOPT_TCP_KEEPALIVE, 1)
        meter = settings.meter
        var (connectTimeout, stallTimeout) = (settings.connectTimeout, settings.stallTimeout)
        if let meter = settings.meter, meter.patient {
            let patience = meter.log.patience
            (connectTimeout, stallTimeout) = (min(meter.log.connectCeiling, patience), patience)
        }
        set(CURLOPT_CONNECTTIMEOUT_MS, Int(connectTimeout * 1000))
        if let ca = settings.caFile { set(CURLOPT_CAINFO, ca) }
        if let basic = settings.basicAuth {
            set(CURLOPT_HTTPAUTH, ferry_auth_basic())
            set(CURLOPT_USERPWD, basic)
        } else if let token = settings.bearerToken {
            set(CURLOPT_HTTPAUTH, ferry_auth_bearer())
            set(CURLOPT_XOAUTH2_BEARER, token)
        }
        // Every request of a session is abandoned once it moves slower than min-speed (with
        // min-speed = 0: once nothing at all arrives) for stall-timeout, so a server that sends
        // its headers and then trickles or stops never holds a run, or an agent's session, for good.
        if stallTimeout > 0 {
            set(CURLOPT_LOW_SPEED_LIMIT, Int(max(1, settings.minSpeed)))
            set(CURLOPT_LOW_SPEED_TIME, max(1, Int(stallTimeout.rounded(.up))))
        }
        if let headerList { curl_slist_free_all(headerList) }
        headerList = nil
        for h in extraHeaders { headerList = curl_slist_append(headerList, h) }
        if let headerList { ferry_easy_setopt_slist(handle, CURLOPT_HTTPHEADER, headerList) }
    }

    /// Below this size a body goes with its request at once. libcurl otherwise sends every PUT
    /// with `Expect: 100-continue` and waits a round trip for the server's go-ahead, which only
    /// saves the body's bytes when the server refuses it: worth a round trip from about the bytes
    /// a link carries in one (50 ms at 100 Mbit/s: 625 KB; 20 ms at 1 Gbit/s: 2.5 MB).
    static let expectContinueFrom: Int64 = 1 << 20

    /// The request uploads a body of `size` bytes (after `configure`): a PUT unless the caller
    /// names another method; one under `expectContinueFrom` without `Expect: 100-continue`.
    func upload(size: Int64) {
        set(CURLOPT_UPLOAD, 1)
        ferry_easy_setopt_offt(handle, CURLOPT_INFILESIZE_LARGE, curl_off_t(size))
        guard size < EasyHandle.expectContinueFrom else { return }
        headerList = curl_slist_append(headerList, "Expect:")
        if let headerList { ferry_easy_setopt_slist(handle, CURLOPT_HTTPHEADER, headerList) }
    }

    var responseCode: Int {
        var code = 0
        ferry_easy_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &code)
        return code
    }

    var errorText: String? { errorBuffer.pointee == 0 ? nil : String(cString: errorBuffer) }

    /// The request is done: its first byte's time goes to its source's meter, if it has one.
    func recordFirstByte() { meter?.record(self) }

    /// The seconds from the request's last byte sent to the response's first byte: the path's round
    /// trip and the server's think time, without connecting (nil when libcurl has no figure).
    var requestToFirstByte: Double? {
        var sent: curl_off_t = 0, first: curl_off_t = 0
        guard ferry_easy_getinfo_offt(handle, CURLINFO_PRETRANSFER_TIME_T, &sent) == CURLE_OK,
              ferry_easy_getinfo_offt(handle, CURLINFO_STARTTRANSFER_TIME_T, &first) == CURLE_OK,
              first > 0, first >= sent else { return nil }
        return Double(first - sent) / 1e6
    }
}

/// Receives response headers into a `ResponseHeaders` (userdata: Unmanaged<HeaderSink>).
final class HeaderSink {
    var headers = ResponseHeaders()
}

let headerCallback: ferry_data_callback = { buffer, size, count, userdata in
    let sink = Unmanaged<HeaderSink>.fromOpaque(userdata!).takeUnretainedValue()
    let n = size * count
    buffer.map { sink.headers.consume(UnsafeBufferPointer(start: UnsafeRawPointer($0).assumingMemoryBound(to: UInt8.self), count: n)) }
    return n
}

