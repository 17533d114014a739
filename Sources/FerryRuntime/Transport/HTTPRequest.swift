import FerryCore

/// One HTTP request as a remote builds it (URL, method, headers, signing): the engine's transfers
/// add only their body and range.
struct HTTPRequest {
    var url: String
    var method = "GET"
    var headers: [String] = []
    var settings: HTTPSettings
}

/// How a remote reads a file for a download: `build` makes the request for the bytes from an
/// offset under the validator recorded with them (called as the transfer starts, so a signature
/// is fresh; it fails when it cannot sign: S3 credentials that expired and cannot be renewed);
/// `explain` turns an error answer's status and body into words, where the remote's errors say
/// more than their status (S3's XML).
struct ReadRequest {
    let build: (_ offset: Int64, _ validator: String?) throws(FerryError) -> HTTPRequest
    var explain: ((_ status: Int, _ body: [UInt8]) -> String?)? = nil
    /// The remote's ETags are derived from the content (S3): one holds as a validator even for an
    /// object written within the last second, which a time-derived one (nginx) does not.
    var contentETags = false
    /// The server may be asked for several ranges at once (`multipart/byteranges`); one that
    /// answers otherwise is asked for one range at a time. S3 serves one range per request.
    var multipleRanges = false
}
