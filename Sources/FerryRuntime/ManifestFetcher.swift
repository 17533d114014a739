import CCurl
import Glibc
import FerryCore

/// The outcome of a conditional manifest fetch.
public enum ManifestFetch {
    /// The remote says nothing changed since the validators we sent (HTTP 304, or the same file).
    case unchanged
    case fetched(bytes: [UInt8], etag: String?, lastModified: String?)
}

/// Fetches a session's manifest with a conditional GET (`If-None-Match` / `If-Modified-Since`),
/// or for `file://` remotes reads it and uses its size, mtime and inode as the validator.
/// A manifest larger than `maximumSize` (`max-manifest-size`) is refused as soon as that is known:
/// from `Content-Length` or the file's size before any byte is read, else when the body passes it.
public struct ManifestFetcher {
    let settings: HTTPSettings
    let maximumSize: Int64

    public init(settings: HTTPSettings, maximumSize: Int64) {
        self.settings = settings
        self.maximumSize = maximumSize
    }

    /// `announced`: the size the server or the file system gave before the body was read, if that
    /// size is what gave it away; nil when the body itself grew past the cap.
    private func tooLarge(_ url: String, _ announced: Int64?) -> FerryError {
        let how = announced.map { " (\(Units.formatBytes($0))): refused without reading it" }
            ?? ": refused once the body passed it (the server did not announce its length)"
        return .manifest("manifest \(url) is larger than max-manifest-size = \(Units.formatBytes(maximumSize))\(how)",
                         hint: "if a manifest this large is intended, raise max-manifest-size for the session")
    }

    public func fetch(url: String, etag: String?, lastModified: String?) throws(FerryError) -> ManifestFetch {
        if settings.scheme == .file { return try fetchFile(url: url, previous: etag) }
        let easy = EasyHandle()
        var conditions: [String] = []
        if let etag { conditions.append("If-None-Match: \(etag)") }
        if let lastModified { conditions.append("If-Modified-Since: \(lastModified)") }
        easy.configure(url: url, settings: settings, extraHeaders: conditions)
        easy.set(CURLOPT_ACCEPT_ENCODING, "")  // manifests compress well; libcurl decodes
        easy.set(CURLOPT_MAXFILESIZE_LARGE, Int(maximumSize))
        let body = BodyBuffer(limit: Int(maximumSize))
        let headers = HeaderSink()
        let bodyRef = Unmanaged.passRetained(body)
        let headerRef = Unmanaged.passRetained(headers)
        defer {
            bodyRef.release()
            headerRef.release()
        }
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_WRITEFUNCTION, bodyCallback)
        easy.set(CURLOPT_WRITEDATA, pointer: bodyRef.toOpaque())
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_HEADERFUNCTION, headerCallback)
        easy.set(CURLOPT_HEADERDATA, pointer: headerRef.toOpaque())
        body.announced = { headers.headers.contentLength }
        let code = curl_easy_perform(easy.handle)
        if body.overflowed || code == CURLE_FILESIZE_EXCEEDED {
            let announced = headers.headers.contentLength.flatMap { $0 > maximumSize ? $0 : nil }
            throw tooLarge(url, announced)
        }
        guard code == CURLE_OK else {
            let why = Curl.describe(code, errorText: easy.errorText, headers: headers.headers)
            let cause = Curl.cause(code, errorText: easy.errorText, headers: headers.headers)
            throw FerryError(.remote, "cannot fetch the manifest \(url): \(why)",
                             hint: cause.isConnectivity ? "check that the remote is up and reachable from this machine" :
                                (code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_CACERT_BADFILE
                                 ? "if the server uses a private CA, name its certificate with ca-file =" : nil),
                             cause: cause)
        }
        let status = easy.responseCode
        if status == 304 { return .unchanged }
        guard status == 200 else {
            var hint: String?
            if status == 401 || status == 403 { hint = "check the credentials file named in the config (basic-auth-file or bearer-token-file)" }
            if status == 404 { hint = "check 'remote =' and 'manifest =' in the config, and that the manifest was published" }
            throw FerryError(.remote, "cannot fetch the manifest \(url): HTTP \(status) \(headers.headers.reason)".trimmingSpaces(), hint: hint,
                             cause: .http(status: status))
        }
        return .fetched(bytes: body.bytes, etag: headers.headers.etag, lastModified: headers.headers.lastModified)
    }

    private func fetchFile(url: String, previous: String?) throws(FerryError) -> ManifestFetch {
        guard let path = RemoteLocation.decodeFileURL(url) else { throw .remote("cannot read the manifest \(url): not a valid file URL") }
        var st = stat()
        guard stat(path, &st) == 0 else {
            throw .remote("cannot read the manifest \(url): \(FileSystem.errorText())",
                          hint: "check 'remote =' and 'manifest =' in the config, and that the manifest was published")
        }
        let validator = "file:\(st.st_size):\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec):\(st.st_ino)"
        if validator == previous { return .unchanged }
        if Int64(st.st_size) > maximumSize { throw tooLarge(url, Int64(st.st_size)) }
        let bytes: [UInt8]
        do { bytes = try FileSystem.readFile(path, limit: Int(maximumSize)) } catch {
            throw .remote("cannot read the manifest \(url): \(error.message)")
        }
        return .fetched(bytes: bytes, etag: validator, lastModified: nil)
    }
}

/// Collects a response body in memory, up to a limit.
final class BodyBuffer {
    var bytes: [UInt8] = []
    let limit: Int
    var overflowed = false
    /// The length the response announced (read at the first body byte).
    var announced: () -> Int64? = { nil }
    init(limit: Int) { self.limit = limit }
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
    buffer.map { body.bytes.append(contentsOf: UnsafeRawBufferPointer(start: $0, count: n)) }
    return n
}
