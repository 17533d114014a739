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
public struct ManifestFetcher {
    public static let maximumSize = 1 << 30
    let settings: HTTPSettings

    public init(settings: HTTPSettings) { self.settings = settings }

    public func fetch(url: String, etag: String?, lastModified: String?) throws(FerryError) -> ManifestFetch {
        if settings.scheme == .file { return try fetchFile(url: url, previous: etag) }
        let easy = EasyHandle()
        var conditions: [String] = []
        if let etag { conditions.append("If-None-Match: \(etag)") }
        if let lastModified { conditions.append("If-Modified-Since: \(lastModified)") }
        easy.configure(url: url, settings: settings, extraHeaders: conditions)
        easy.set(CURLOPT_ACCEPT_ENCODING, "")  // manifests compress well; libcurl decodes
        let body = BodyBuffer(limit: ManifestFetcher.maximumSize)
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
        let code = curl_easy_perform(easy.handle)
        if body.overflowed {
            throw .manifest("manifest \(url) is larger than \(Units.formatBytes(Int64(ManifestFetcher.maximumSize)))")
        }
        guard code == CURLE_OK else {
            let why = Curl.describe(code, buffer: easy.errorBuffer)
            throw .remote("cannot fetch the manifest \(url): \(why)",
                          hint: Curl.isConnectivityError(code) ? "check that the remote is up and reachable from this machine" :
                                (code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_CACERT_BADFILE
                                 ? "if the server uses a private CA, name its certificate with ca-file =" : nil))
        }
        let status = easy.responseCode
        if status == 304 { return .unchanged }
        guard status == 200 else {
            var hint: String?
            if status == 401 || status == 403 { hint = "check the credentials file named in the config (basic-auth-file or bearer-token-file)" }
            if status == 404 { hint = "check 'remote =' and 'manifest =' in the config, and that the manifest was published" }
            throw .remote("cannot fetch the manifest \(url): HTTP \(status) \(headers.headers.reason)".trimmingSpaces(), hint: hint)
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
        let validator = "file:\(st.st_size):\(Timestamp(st.st_mtim).nanosecondsSinceEpoch):\(st.st_ino)"
        if validator == previous { return .unchanged }
        let bytes: [UInt8]
        do { bytes = try FileSystem.readFile(path, limit: ManifestFetcher.maximumSize) } catch {
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
    init(limit: Int) { self.limit = limit }
}

let bodyCallback: ferry_data_callback = { buffer, size, count, userdata in
    let body = Unmanaged<BodyBuffer>.fromOpaque(userdata!).takeUnretainedValue()
    let n = size * count
    if body.bytes.count + n > body.limit {
        body.overflowed = true
        return 0
    }
    buffer.map { body.bytes.append(contentsOf: UnsafeRawBufferPointer(start: $0, count: n)) }
    return n
}
