import CCrypto
import FerryCore

/// AWS Signature Version 4 for S3, computed here with libcrypto's HMAC-SHA256. A request is signed
/// over its method, its path and query exactly as sent (`S3Key.encode`), the headers named in
/// `SignedHeaders` (always `host`, `x-amz-date` and `x-amz-content-sha256`) and the payload's
/// SHA-256: the real hash where ferry has it, `UNSIGNED-PAYLOAD` where it does not yet (a file
/// hashed as it is sent), never `aws-chunked` or trailers.
struct SigV4: Sendable {
    let credentials: S3Credentials
    let region: String
    let service = "s3"

    static let unsignedPayload = "UNSIGNED-PAYLOAD"
    /// The SHA-256 of no bytes: the payload hash of a GET, HEAD or DELETE.
    static let emptyPayload = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// A request to sign: what the canonical request is made of.
    struct Request {
        var method: String
        /// `host[:port]` exactly as the Host header carries it.
        var host: String
        /// The path as sent: `/`, then each segment encoded (`S3Key.encode`).
        var path: String
        /// Query parameters, not encoded (a parameter without a value has "").
        var query: [(String, String)] = []
        /// Headers besides host and the x-amz- ones the signer adds; all of them are signed.
        var headers: [(String, String)] = []
        var payloadHash: String
    }

    /// The headers that carry the signature (and the ones it covers), in `Name: value` form.
    func headers(for request: Request, at time: Timestamp) -> [String] {
        let amzDate = SigV4.amzDate(time)
        var signed = request.headers.map { ($0.0.lowercased(), SigV4.trimmed($0.1)) }
        signed.append(("host", request.host))
        signed.append(("x-amz-date", amzDate))
        signed.append(("x-amz-content-sha256", request.payloadHash))
        if let token = credentials.sessionToken { signed.append(("x-amz-security-token", token)) }
        signed.sort { $0.0 < $1.0 }
        let signature = self.signature(request, signed: signed, amzDate: amzDate)
        let names = signed.map(\.0).joined(separator: ";")
        let scope = "\(amzDate.prefix(8))/\(region)/\(service)/aws4_request"
        // Host is sent as it is signed (libcurl would leave a default port out of its own).
        var out = signed.filter { name, _ in !request.headers.contains { $0.0.lowercased() == name } }
            .map { ($0.0 == "host" ? "Host" : $0.0) + ": " + $0.1 }
        out += request.headers.map { "\($0.0): \($0.1)" }
        out.append("Authorization: AWS4-HMAC-SHA256 Credential=\(credentials.accessKey)/\(scope), SignedHeaders=\(names), Signature=\(signature)")
        return out
    }

    /// The canonical request of product.md's S3 section, as AWS defines it.
    static func canonicalRequest(_ request: Request, signed: [(String, String)]) -> String {
        var pairs: [(String, String)] = request.query.map { (name: String, value: String) -> (String, String) in
            (S3Key.encode(name, keepSlash: false), S3Key.encode(value, keepSlash: false))
        }
        pairs.sort { (a: (String, String), b: (String, String)) -> Bool in a.0 == b.0 ? a.1 < b.1 : a.0 < b.0 }
        let query = pairs.map { (pair: (String, String)) -> String in pair.0 + "=" + pair.1 }.joined(separator: "&")
        let headers = signed.map { "\($0.0):\($0.1)\n" }.joined()
        let names = signed.map(\.0).joined(separator: ";")
        return "\(request.method)\n\(request.path)\n\(query)\n\(headers)\n\(names)\n\(request.payloadHash)"
    }

    /// The hex signature of `request` with `signed` (lowercase names, sorted) at `amzDate`.
    func signature(_ request: Request, signed: [(String, String)], amzDate: String) -> String {
        let canonical = SigV4.canonicalRequest(request, signed: signed)
        let day = String(amzDate.prefix(8))
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let stringToSign = "AWS4-HMAC-SHA256\n\(amzDate)\n\(scope)\n\(SigV4.sha256Hex(Array(canonical.utf8)))"
        var key = SigV4.hmac(key: Array(("AWS4" + credentials.secretKey).utf8), day)
        key = SigV4.hmac(key: key, region)
        key = SigV4.hmac(key: key, service)
        key = SigV4.hmac(key: key, "aws4_request")
        return SigV4.hex(SigV4.hmac(key: key, stringToSign))
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

    static func sha256Hex(_ bytes: [UInt8]) -> String {
        let hasher = SHA256Hasher()
        bytes.withUnsafeBytes { hasher.update($0.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!, count: $0.count) }
        return hasher.finalize().hex
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// S3 keys in URLs and canonical requests: every byte but the unreserved ones percent-encoded,
/// `/` kept between path segments. The URL ferry sends and the path it signs are the same
/// string, so a key with spaces, `+`, `%`, `#`, `?` or non-ASCII letters signs as it is sent.
enum S3Key {
    static func encode(_ text: String, keepSlash: Bool) -> String { text.percentEncoded(keepingSlashes: keepSlash) }
}
