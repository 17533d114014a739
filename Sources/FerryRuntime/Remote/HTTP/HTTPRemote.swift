import CCurl
import Glibc
import FerryCore

/// An `http://` or `https://` remote, through libcurl. The manifest comes with a conditional GET
/// (`If-None-Match` / `If-Modified-Since`); a manifest larger than `max-manifest-size` is refused
/// from `Content-Length` before any byte is read, else when the body passes it. Files come as
/// engine transfers, resumed with `Range` under `If-Range`.
struct HTTPRemote: Remote {
    let base: RemoteLocation
    let settings: HTTPSettings
    let clock: any Clock
    /// The collections a push's WebDAV requests know to exist.
    let dav = DAVCollections()

    func origin(of source: RelativePath) -> Download.Origin { origin(url: base.url(for: source)) }

    func origin(of source: RelativePath, content: SHA256Digest) -> Download.Origin {
        origin(url: base.url(for: source) + "?ferry_sha256=" + content.hex)
    }

    private func origin(url: String) -> Download.Origin {
        var read = ReadRequest { [settings] offset, validator in
            // A range is resumed under If-Range: a server whose file changed answers 200 with all of it.
            HTTPRequest(url: url, headers: offset > 0 ? validator.map { ["If-Range: \($0)"] } ?? [] : [], settings: settings)
        }
        read.multipleRanges = true
        return .request(read)
    }

    func fetchRange(url: String, range: Range<Int64>) throws(FerryError) -> [UInt8]? {
        let asked = "Range: bytes=\(range.lowerBound)-\(range.upperBound - 1)"
        let answer = EasyHandle.borrow { easy in
            Exchange.perform(easy, HTTPRequest(url: url, headers: [asked], settings: settings), limit: range.count, followRedirects: true)
        }
        return try Remotes.range(answer, range, url: url)
    }

    func fetchRanges(url: String, ranges: [Range<Int64>], size: Int64) throws(FerryError) -> [[UInt8]]? {
        let asked = "Range: bytes=" + ranges.map { "\($0.lowerBound)-\($0.upperBound - 1)" }.joined(separator: ",")
        // The parts with their headers (bounded by the reader), or the whole object, at most.
        let limit = max(Int(size), ranges.reduce(0) { $0 + $1.count } + ranges.count * (MultipartRanges.maximumHeaders + MultipartRanges.maximumBetween))
        let answer = EasyHandle.borrow { easy in
            Exchange.perform(easy, HTTPRequest(url: url, headers: [asked], settings: settings), limit: limit, followRedirects: true)
        }
        return try Remotes.ranges(answer, ranges, size: size, url: url)
    }

    func fetchManifest(url: String, etag: String?, lastModified: String?, maximumSize: Int64) throws(FerryError) -> ManifestFetch {
        try fetchManifest(url: url, etag: etag, lastModified: lastModified, maximumSize: maximumSize, spill: nil)
    }

    /// The rest of what `part` holds, as one range; else the whole, written into the part as it comes.
    func fetchKept(url: String, part: ObjectPart) throws(FerryError) -> ManifestFetch? {
        let resumed = try part.resume(url: url) { range, limit, spill in
            EasyHandle.borrow { easy in
                Exchange.perform(easy, HTTPRequest(url: url, headers: ["Range: " + range], settings: settings),
                                 limit: limit, followRedirects: true, spill: spill)
            }
        }
        if let resumed { return resumed }
        return try fetchManifest(url: url, etag: nil, lastModified: nil, maximumSize: part.size, spill: part.wholeSpill)
    }

    private func fetchManifest(url: String, etag: String?, lastModified: String?, maximumSize: Int64,
                               spill: BodySpill?) throws(FerryError) -> ManifestFetch {
        var conditions: [String] = []
        if let etag { conditions.append("If-None-Match: \(etag)") }
        if let lastModified { conditions.append("If-Modified-Since: \(lastModified)") }
        let answer = EasyHandle.borrow { easy in
            Exchange.perform(easy, HTTPRequest(url: url, headers: conditions, settings: settings), limit: Int(maximumSize),
                             followRedirects: true, spill: spill) { easy in
                easy.set(CURLOPT_ACCEPT_ENCODING, "")  // manifests compress well; libcurl decodes
                easy.set(CURLOPT_MAXFILESIZE_LARGE, Int(maximumSize))
            }
        }
        let code = answer.code
        let headers = answer.headers
        if answer.overflowed {
            let announced = headers.contentLength.flatMap { $0 > maximumSize ? $0 : nil }
            throw Remotes.tooLarge(url, maximumSize: maximumSize, announced: announced)
        }
        guard code == CURLE_OK else {
            let why = Curl.describe(code, errorText: answer.errorText, headers: headers)
            let cause = Curl.cause(code, errorText: answer.errorText, headers: headers)
            var hint: String?
            if cause.isConnectivity {
                hint = "check that the remote is up and reachable from this machine"
            } else if let scheme = Curl.schemeHint(code, errorText: answer.errorText, status: nil, body: [], url: url) {
                hint = scheme
            } else if code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_CACERT_BADFILE {
                hint = settings.caFile.map { "the server's certificate is not signed by the CA in ca-file = \($0)" }
                    ?? "if the server uses a private CA, name its certificate with ca-file ="
            }
            throw FerryError(.remote, "cannot fetch the manifest \(url): \(why)", hint: hint, cause: cause)
        }
        let status = headers.status
        if status == 304 {
            guard !conditions.isEmpty else { throw Remotes.unsolicitedNotModified(url) }
            return .unchanged
        }
        guard status == 200 else {
            var hint: String?
            if status == 401 || status == 403 { hint = "check the credentials file named in the config (basic-auth-file or bearer-token-file)" }
            if status == 404 { hint = "check 'remote =' and 'manifest =' in the config, and that the manifest was published" }
            if let scheme = Curl.schemeHint(CURLE_OK, errorText: nil, status: status, body: answer.body, url: url) { hint = scheme }
            let error = FerryError(.remote, "cannot fetch the manifest \(url): HTTP \(status) \(headers.reason)".trimmingSpaces(), hint: hint,
                                   cause: .http(status: status))
            if status == 404 || status == 410 { return .missing(error) }
            throw error
        }
        // Validators that do not hold (a manifest changed within the second before the answer) are
        // not kept: the next fetch asks for the whole manifest instead of trusting a 304.
        let hold = headers.validatorsHold
        // Where the bytes came from, said with the source when a redirect took the request elsewhere.
        let elsewhere = answer.redirectedTo.flatMap { $0 == url ? nil : Printable.name(String($0.prefix(300))) }
        return .fetched(bytes: answer.body, etag: hold ? headers.etag : nil, lastModified: hold ? headers.lastModified : nil, redirectedTo: elsewhere)
    }
}
