import CCurl
import Glibc
import FerryCore

/// An `s3://BUCKET/PREFIX/` remote: S3-compatible object storage (AWS, SeaweedFS, MinIO, Ceph
/// RGW). Every request is signed here (`SigV4`); the manifest and the files are objects under the
/// prefix, their keys the prefix plus the manifest's paths. The manifest comes with a conditional
/// GET (`If-None-Match` on its ETag); a download resumes with `Range` under `If-Match` (S3 servers
/// do not all honour `If-Range`), and a 412 starts the file again from zero. What S3 answers in
/// its XML errors is said in words, with the key to fix (`S3Errors`).
struct S3Remote: Remote {
    let base: RemoteLocation
    let bucket: String
    /// The key prefix: empty, or ending in `/`.
    let prefix: String
    let options: S3Options
    /// The region in force: `s3-region`, else the AWS profile's, else the default.
    let region: String
    let settings: HTTPSettings
    let signer: SigV4
    /// Requests are signed with its time; downloads keep their checkpoints on it.
    let clock: any Clock
    /// `http` or `https`, and the host (with its port) requests go to.
    let scheme: String
    let host: String
    /// Files larger than this go as multipart uploads, in parts of this size (`upload-part-size`).
    let partSize: Int64

    init(session: SessionConfig, clock: any Clock, stop: StopCondition? = nil, meter: FirstBytes.Meter? = nil) throws(FerryError) {
        base = session.remote
        self.clock = clock
        bucket = session.remote.bucket
        prefix = session.remote.keyPrefix
        options = session.s3
        partSize = session.uploadPartSize
        var settings = try HTTPSettings.of(session)
        settings.stop = stop
        settings.meter = meter
        self.settings = settings
        let chain = try S3CredentialChain.resolve(session)
        region = chain.region
        signer = SigV4(credentials: chain.provider, region: region)
        // Fetched here, on the session's thread, not by the first request the engine signs: the
        // engine's thread never waits for a credentials source (`S3CredentialProvider`).
        _ = try chain.provider.current(now: clock.now())
        let endpoint = options.effectiveEndpoint(region: region)
        let sep = endpoint.firstRange(of: "://")!
        scheme = String(endpoint[..<sep.lowerBound])
        let authority = String(endpoint[sep.upperBound...])
        host = options.usesPathStyle ? authority : bucket + "." + authority
    }

    /// The object key of a path under the remote.
    func key(_ path: String) -> String { prefix + path }

    /// A signed request for `key` (nil: the bucket itself). `payloadHash` is the body's SHA-256
    /// in hex (`SigV4.emptyPayload` for none). An error when no valid credentials can be had.
    func request(_ method: String, key: String?, query: [(String, String)] = [], headers: [(String, String)] = [],
                 payloadHash: String = SigV4.emptyPayload) throws(FerryError) -> HTTPRequest {
        var path = options.usesPathStyle ? "/" + bucket.percentEncoded(keepingSlashes: false) : ""
        path += "/" + (key?.percentEncoded(keepingSlashes: true) ?? "")
        let signing = SigV4.Request(method: method, host: host, path: path, query: query, headers: headers, payloadHash: payloadHash)
        let signed = try signer.headers(for: signing, at: clock.now())
        // The query is sent in the form it is signed in.
        let url = "\(scheme)://\(host)\(path)" + (query.isEmpty ? "" : "?" + SigV4.canonicalQuery(query))
        return HTTPRequest(url: url, method: method, headers: signed, settings: settings)
    }

    /// The key of the object at `url` under the remote (its path there, percent-decoded); nil
    /// for a URL that is not under it.
    private func key(ofURL url: String) -> String? {
        guard url.hasPrefix(base.url), let path = String(url.dropFirst(base.url.count)).removingPercentEncoding() else { return nil }
        return key(path)
    }

    func fetchRange(url: String, range: Range<Int64>) throws(FerryError) -> [UInt8]? {
        guard let key = key(ofURL: url) else { return nil }
        let signed = try request("GET", key: key, headers: [("Range", "bytes=\(range.lowerBound)-\(range.upperBound - 1)")])
        let answer = EasyHandle.borrow { Exchange.perform($0, signed, limit: range.count) }
        return try Remotes.range(answer, range, url: url)
    }

    func fetchManifest(url: String, etag: String?, lastModified: String?, maximumSize: Int64) throws(FerryError) -> ManifestFetch {
        try fetchManifest(url: url, etag: etag, maximumSize: maximumSize, spill: nil)
    }

    /// The rest of what `part` holds, as one range; else the whole, written into the part as it comes.
    func fetchKept(url: String, part: ObjectPart) throws(FerryError) -> ManifestFetch? {
        guard let key = key(ofURL: url) else { return nil }
        let resumed = try part.resume(url: url) { range, limit, spill throws(FerryError) in
            let signed = try request("GET", key: key, headers: [("Range", range)])
            return EasyHandle.borrow { Exchange.perform($0, signed, limit: limit, spill: spill) }
        }
        if let resumed { return resumed }
        return try fetchManifest(url: url, etag: nil, maximumSize: part.size, spill: part.wholeSpill)
    }

    private func fetchManifest(url: String, etag: String?, maximumSize: Int64, spill: BodySpill?) throws(FerryError) -> ManifestFetch {
        guard url.hasPrefix(base.url) else { throw .remote("the manifest \(url) is not under the remote \(base.url)") }
        // The manifest's URL names its path percent-encoded (`RemoteLocation.url(for:)`); its key is the path itself.
        guard let path = String(url.dropFirst(base.url.count)).removingPercentEncoding() else {
            throw .remote("the manifest \(url) is not a valid name under the remote")
        }
        let key = self.key(path)
        var conditions: [(String, String)] = []
        if let etag { conditions.append(("If-None-Match", etag)) }
        let answer = try S3Exchange.perform(try request("GET", key: key, headers: conditions), bodyLimit: Int(maximumSize),
                                            spill: spill, what: "fetch the manifest \(url)")
        if answer.overflowed { throw Remotes.tooLarge(url, maximumSize: maximumSize, announced: answer.headers.contentLength) }
        switch answer.headers.status {
        case 304:
            guard !conditions.isEmpty else { throw Remotes.unsolicitedNotModified(url) }
            return .unchanged
        case 200:
            // S3's ETag comes from the content: it holds even for a manifest written this second.
            return .fetched(bytes: answer.body, etag: answer.headers.etag, lastModified: nil)
        case 404 where S3Errors.fields(answer.body).code != "NoSuchBucket":
            return .missing(S3Errors.failure(answer, doing: "fetch the manifest \(url)", bucket: bucket, key: key, region: region, credentials: signer.credentials.source))
        default:
            throw S3Errors.failure(answer, doing: "fetch the manifest \(url)", bucket: bucket, key: key, region: region, credentials: signer.credentials.source)
        }
    }

    func origin(of source: RelativePath) -> Download.Origin {
        let key = self.key(source.string)
        return .request(ReadRequest(build: { (offset: Int64, validator: String?) throws(FerryError) -> HTTPRequest in
            try request("GET", key: key, headers: offset > 0 ? validator.map { [("If-Match", $0)] } ?? [] : [])
        }, explain: { [bucket, region, source = signer.credentials.source] status, body in
            S3Errors.explain(status: status, body: body, bucket: bucket, key: key, region: region, credentials: source)?.text
        }, contentETags: true))
    }
}

/// One S3 request made on the calling thread (the manifest, a listing, a multipart step).
enum S3Exchange {
    static func perform(_ request: HTTPRequest, body: [UInt8]? = nil, bodyLimit: Int = 1 << 20, spill: BodySpill? = nil,
                        what: String) throws(FerryError) -> Exchange.Answer {
        let answer = EasyHandle.borrow { Exchange.perform($0, request, body: body, limit: bodyLimit, spill: spill) }
        guard answer.code == CURLE_OK || answer.overflowed else {
            let cause = Curl.cause(answer.code, errorText: answer.errorText, headers: answer.headers)
            throw FerryError(.remote, "cannot \(what): \(Curl.describe(answer.code, errorText: answer.errorText, headers: answer.headers))",
                             hint: cause.isConnectivity ? "check that the store (s3-endpoint) is up and reachable from this machine" : nil, cause: cause)
        }
        return answer
    }
}

extension S3Remote: RemoteDirectory {
    /// ListObjectsV2 under the prefix, a page of 1,000 at a time, with `/` as delimiter (names
    /// further down are not listed).
    func entries(limit: Int) throws(FerryError) -> [DirectoryEntry] {
        var out: [DirectoryEntry] = []
        var token: String?
        repeat {
            var query = [("list-type", "2"), ("prefix", prefix), ("delimiter", "/"), ("max-keys", "1000")]
            if let token { query.append(("continuation-token", token)) }
            let answer = try S3Exchange.perform(try request("GET", key: nil, query: query), bodyLimit: 8 << 20, what: "list \(base.url)")
            guard answer.headers.status == 200, !answer.overflowed else {
                throw S3Errors.failure(answer, doing: "list \(base.url)", bucket: bucket, key: prefix, region: region, credentials: signer.credentials.source)
            }
            for block in S3XML.blocks("Contents", in: answer.body) {
                guard let key = S3XML.element("Key", in: block), key.hasPrefix(prefix) else { continue }
                let name = String(key.dropFirst(prefix.count))
                // The ETag (the content's MD5 for a plain PUT) and the size stamp the content.
                let stamp = S3XML.element("ETag", in: block).map { $0 + "-" + (S3XML.element("Size", in: block) ?? "") }
                if !name.isEmpty && !name.contains("/") { out.append(DirectoryEntry(name: name, stamp: stamp)) }
            }
            token = S3XML.element("IsTruncated", in: answer.body) == "true" ? S3XML.element("NextContinuationToken", in: answer.body) : nil
        } while token != nil && out.count < limit
        return Array(out.prefix(limit))
    }
}
