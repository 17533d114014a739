import CCurl
import FerryCore

/// One request made on the calling thread, outside the engine (a manifest, a WebDAV request, an
/// S3 step): it sends `body` if given and keeps the answer's headers and body up to `limit`
/// bytes. What lies beyond the limit either fails the exchange (`overflowed`: a manifest over its
/// cap) or is read and dropped (`dropExcess`: an answer only partly of interest).
enum Exchange {
    struct Answer {
        var code: CURLcode
        var errorText: String?
        var headers: ResponseHeaders
        var body: [UInt8]
        var overflowed: Bool
        /// The URL that answered, when a redirect was followed to it (nil: the one asked).
        var redirectedTo: String? = nil
        var ok: Bool { code == CURLE_OK && !overflowed }
    }

    /// `prepare` sets what this request needs beyond `request` (decoding, size limits).
    /// `spill`: where the body is also written as it arrives, when its headers say it is wanted.
    static func perform(_ easy: EasyHandle, _ request: HTTPRequest, body: [UInt8]? = nil, limit: Int, dropExcess: Bool = false,
                        followRedirects: Bool = false, spill: BodySpill? = nil,
                        prepare: (EasyHandle) -> Void = { _ in }) -> Answer {
        easy.configure(url: request.url, settings: request.settings, extraHeaders: request.headers)
        // A body that may run to MiBs (a pack or its runs, a bundle, a manifest, over HTTP or S3)
        // is read 256 KiB at a time, not in libcurl's 16 KiB.
        if limit >= 1 << 20 { easy.set(CURLOPT_BUFFERSIZE, 256 << 10) }
        // A write or a signed request would be replayed elsewhere by a redirect.
        if !followRedirects { easy.set(CURLOPT_FOLLOWLOCATION, 0) }
        if request.method == "HEAD" {
            easy.set(CURLOPT_NOBODY, 1)
        } else if request.method != "GET" && !(request.method == "PUT" && body != nil) {
            easy.set(CURLOPT_CUSTOMREQUEST, request.method)
        }
        let sink = BodyBuffer(limit: limit)
        let headers = HeaderSink()
        let source = UploadBuffer(body ?? [])
        let sinkRef = Unmanaged.passRetained(sink)
        let headerRef = Unmanaged.passRetained(headers)
        let sourceRef = Unmanaged.passRetained(source)
        defer {
            sinkRef.release()
            headerRef.release()
            sourceRef.release()
        }
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_WRITEFUNCTION, dropExcess ? keptBodyCallback : bodyCallback)
        easy.set(CURLOPT_WRITEDATA, pointer: sinkRef.toOpaque())
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_HEADERFUNCTION, headerCallback)
        easy.set(CURLOPT_HEADERDATA, pointer: headerRef.toOpaque())
        if body != nil {
            easy.upload(size: Int64(source.bytes.count))
            ferry_easy_setopt_datacb(easy.handle, CURLOPT_READFUNCTION, uploadBufferCallback)
            easy.set(CURLOPT_READDATA, pointer: sourceRef.toOpaque())
        }
        sink.announced = { headers.headers.contentLength }
        if let spill {
            sink.spill = spill
            spill.headers = { headers.headers }
        }
        let watch = request.settings.stop.map { Unmanaged.passRetained(StopWatch($0)) }
        defer { watch?.release() }
        if let watch {
            easy.set(CURLOPT_NOPROGRESS, 0)
            ferry_easy_setopt_xferinfo(easy.handle, stopWatchCallback)
            easy.set(CURLOPT_XFERINFODATA, pointer: watch.toOpaque())
        }
        prepare(easy)
        let code = curl_easy_perform(easy.handle)
        easy.recordFirstByte()
        var answer = Answer(code: code, errorText: easy.errorText, headers: headers.headers, body: sink.bytes,
                            overflowed: sink.overflowed || code == CURLE_FILESIZE_EXCEEDED)
        var redirects = 0
        ferry_easy_getinfo_long(easy.handle, CURLINFO_REDIRECT_COUNT, &redirects)
        var final: UnsafeMutablePointer<CChar>?
        if redirects > 0, ferry_easy_getinfo_string(easy.handle, CURLINFO_EFFECTIVE_URL, &final) == CURLE_OK, let final {
            answer.redirectedTo = String(cString: final)
        }
        return answer
    }
}

/// Collects a response body in memory, up to a limit.
final class BodyBuffer {
    var bytes: [UInt8] = []
    let limit: Int
    var overflowed = false
    /// The length the response announced (read at the first body byte).
    var announced: () -> Int64? = { nil }
    var spill: BodySpill?
    init(limit: Int) { self.limit = limit }
}

/// Where a body is also written as it arrives (`ObjectPart`: a large metadata object, kept so a
/// run killed while it comes resumes it), given the bytes and their offset in the body. Whether
/// it is wanted is asked of the answer's headers at its first byte (a redirect's or an error's
/// body is not).
final class BodySpill {
    private let wanted: (ResponseHeaders) -> Bool
    private let write: (UnsafeRawBufferPointer, Int64) -> Void
    fileprivate var headers: () -> ResponseHeaders? = { nil }
    private var on: Bool?

    init(wanted: @escaping (ResponseHeaders) -> Bool, write: @escaping (UnsafeRawBufferPointer, Int64) -> Void) {
        self.wanted = wanted
        self.write = write
    }

    fileprivate func take(_ bytes: UnsafeRawBufferPointer, at offset: Int) {
        if on == nil { on = headers().map(wanted) ?? false }
        if on == true { write(bytes, Int64(offset)) }
    }
}

let bodyCallback: ferry_data_callback = { buffer, size, count, userdata in
    let body = Unmanaged<BodyBuffer>.fromOpaque(userdata!).takeUnretainedValue()
    let n = size * count
    // A body announced larger than the limit is refused at its first byte (libcurl's own check
    // covers most cases before that); reading on would only fill memory.
    if body.bytes.isEmpty, let length = body.announced() {
        if length > body.limit {
            body.overflowed = true
            return 0
        }
        // One allocation of the announced size: growing by doubling would hold up to three times
        // the body at the moment of a copy.
        body.bytes.reserveCapacity(Int(length))
    }
    if body.bytes.count + n > body.limit {
        body.overflowed = true
        return 0
    }
    guard let buffer else { return n }
    let bytes = UnsafeRawBufferPointer(start: buffer, count: n)
    body.spill?.take(bytes, at: body.bytes.count)
    body.bytes.append(contentsOf: bytes)
    return n
}

/// The run's stop, asked by libcurl while a request is under way (at least once a second, also
/// while nothing arrives): a nonzero answer ends the request with CURLE_ABORTED_BY_CALLBACK.
final class StopWatch {
    let stop: StopCondition
    init(_ stop: StopCondition) { self.stop = stop }
}

let stopWatchCallback: ferry_xferinfo_callback = { userdata, _, _, _, _ in
    Unmanaged<StopWatch>.fromOpaque(userdata!).takeUnretainedValue().stop.reason == nil ? 0 : 1
}

/// Keeps the first bytes of a body (up to the buffer's limit) and drops the rest.
let keptBodyCallback: ferry_data_callback = { buffer, size, count, userdata in
    let body = Unmanaged<BodyBuffer>.fromOpaque(userdata!).takeUnretainedValue()
    let n = size * count
    let room = min(n, body.limit - body.bytes.count)
    if let buffer, room > 0 { body.bytes.append(contentsOf: UnsafeRawBufferPointer(start: buffer, count: room)) }
    return n
}

/// Bytes a request sends, read by libcurl a piece at a time.
final class UploadBuffer {
    let bytes: [UInt8]
    var offset = 0
    init(_ bytes: [UInt8]) { self.bytes = bytes }
}

let uploadBufferCallback: ferry_data_callback = { buffer, size, count, userdata in
    let source = Unmanaged<UploadBuffer>.fromOpaque(userdata!).takeUnretainedValue()
    let n = min(size * count, source.bytes.count - source.offset)
    guard let buffer, n > 0 else { return 0 }
    source.bytes.withUnsafeBytes { UnsafeMutableRawPointer(buffer).copyMemory(from: $0.baseAddress! + source.offset, byteCount: n) }
    source.offset += n
    return n
}
