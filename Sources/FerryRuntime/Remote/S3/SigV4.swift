import CCrypto
import FerryCore

/// AWS Signature Version 4 for S3, computed here with libcrypto's HMAC-SHA256. A request is signed
/// over its method, its path and query exactly as sent (`String.percentEncoded`: keys with spaces,
/// `+`, `%`, `#`, `?` or non-ASCII letters sign as they are sent), the headers named in
/// `SignedHeaders` (always `host`, `x-amz-date` and `x-amz-content-sha256`) and the payload's
/// SHA-256, never `aws-chunked` or trailers. The keys are the provider's current ones, asked for
/// each request: temporary credentials are renewed under a long-running agent.
struct SigV4: Sendable {
    let credentials: S3CredentialProvider
    let region: String
    let service = "s3"

    /// The SHA-256 of no bytes: the payload hash of a GET, HEAD or DELETE.
    static let emptyPayload = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// A request to sign: what the canonical request is made of.
    struct Request {
        var method: String
        /// `host[:port]` exactly as the Host header carries it.
        var host: String
        /// The path as sent: `/`, then each segment encoded (`String.percentEncoded`).
        var path: String
        /// Query parameters, not encoded (a parameter without a value has ""); sent as
        /// `canonicalQuery` gives them.
        var query: [(String, String)] = []
        /// Headers besides host and the x-amz- ones the signer adds; all of them are signed.
        var headers: [(String, String)] = []
        var payloadHash: String
    }

    /// The headers that carry the signature (and the ones it covers), in `Name: value` form; an
    /// error when no valid credentials can be had (`S3CredentialProvider.current`).
    func headers(for request: Request, at time: Timestamp) throws(FerryError) -> [String] {
        let credentials = try self.credentials.current(now: time)
        let amzDate = SigV4.amzDate(time)
        var signed = request.headers.map { ($0.0.lowercased(), SigV4.trimmed($0.1)) }
        signed.append(("host", request.host))
        signed.append(("x-amz-date", amzDate))
        signed.append(("x-amz-content-sha256", request.payloadHash))
        if let token = credentials.sessionToken { signed.append(("x-amz-security-token", token)) }
        signed.sort { $0.0 < $1.0 }
        let signature = self.signature(request, signed: signed, amzDate: amzDate, secretKey: credentials.secretKey)
        let names = signed.map(\.0).joined(separator: ";")
        // Host is sent as it is signed (libcurl would leave a default port out of its own).
        var out = signed.filter { name, _ in !request.headers.contains { $0.0.lowercased() == name } }
            .map { ($0.0 == "host" ? "Host" : $0.0) + ": " + $0.1 }
        out += request.headers.map { "\($0.0): \($0.1)" }
        out.append("Authorization: AWS4-HMAC-SHA256 Credential=\(credentials.accessKey)/\(scope(amzDate)), SignedHeaders=\(names), Signature=\(signature)")
        return out
    }

    /// The query as it is signed and sent: each name and value encoded, sorted by name, then value.
    static func canonicalQuery(_ query: [(String, String)]) -> String {
        var pairs = query.map { (name: String, value: String) -> (String, String) in
            (name.percentEncoded(keepingSlashes: false), value.percentEncoded(keepingSlashes: false))
        }
        pairs.sort { (a: (String, String), b: (String, String)) -> Bool in a.0 == b.0 ? a.1 < b.1 : a.0 < b.0 }
        return pairs.map { (pair: (String, String)) -> String in pair.0 + "=" + pair.1 }.joined(separator: "&")
    }

    /// The canonical request, as AWS defines it.
    static func canonicalRequest(_ request: Request, signed: [(String, String)]) -> String {
        let headers = signed.map { "\($0.0):\($0.1)\n" }.joined()
        let names = signed.map(\.0).joined(separator: ";")
        return "\(request.method)\n\(request.path)\n\(canonicalQuery(request.query))\n\(headers)\n\(names)\n\(request.payloadHash)"
    }

    /// The credential scope of a signature made at `amzDate`: day, region, service.
    func scope(_ amzDate: String) -> String { "\(amzDate.prefix(8))/\(region)/\(service)/aws4_request" }

    /// The hex signature of `request` with `signed` (lowercase names, sorted) at `amzDate`.
    func signature(_ request: Request, signed: [(String, String)], amzDate: String, secretKey: String) -> String {
        let canonical = SigV4.canonicalRequest(request, signed: signed)
        let stringToSign = "AWS4-HMAC-SHA256\n\(amzDate)\n\(scope(amzDate))\n\(SigV4.sha256Hex(Array(canonical.utf8)))"
        var key = SigV4.hmac(key: Array(("AWS4" + secretKey).utf8), String(amzDate.prefix(8)))
        key = SigV4.hmac(key: key, region)
        key = SigV4.hmac(key: key, service)
        key = SigV4.hmac(key: key, "aws4_request")
        // 32 bytes, written in lowercase hex as a digest is.
        return SigV4.hmac(key: key, stringToSign).withUnsafeBytes { SHA256Digest(bytes: $0).hex }
    }

    /// `20130524T000000Z`.
    static func amzDate(_ time: Timestamp) -> String {
        let text = time.rfc3339  // 2013-05-24T00:00:00Z (fraction dropped below)
        var digits = ""
        for c in text.prefix(19) where c != "-" && c != ":" { digits.append(c) }
        return digits + "Z"
    }

    /// A header value with its surrounding spaces removed and inner runs of spaces made one.
    static func trimmed(_ value: String) -> String {
        value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
    }

    static func hmac(key: [UInt8], _ message: String) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let data = Array(message.utf8)
        key.withUnsafeBytes { k in
            data.withUnsafeBytes { d in
                _ = HMAC(EVP_sha256(), k.baseAddress, Int32(k.count), d.baseAddress?.assumingMemoryBound(to: UInt8.self), d.count, &out, &length)
            }
        }
        return out
    }

    static func sha256Hex(_ bytes: [UInt8]) -> String { SHA256Hasher.digest(of: bytes).hex }
}
