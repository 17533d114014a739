/// What a response may do to a partial file (docs/design.md, data-safety rules 3 and 4): a pure
/// function of what was asked (the resume offset, the validator it was asked under, the manifest's
/// size) and what came back (status, Content-Range, Content-Length, validator). The transfer
/// applies the decision.
public enum ResponsePolicy {
    public struct Asked: Sendable, Equatable {
        /// The offset asked for with `Range` (0: the whole file).
        public var offset: Int64
        /// The validator sent in `If-Range`.
        public var ifRange: String?
        /// The manifest's size, when it gives one.
        public var size: Int64?
        public init(offset: Int64, ifRange: String?, size: Int64?) {
            self.offset = offset
            self.ifRange = ifRange
            self.size = size
        }
    }

    public struct Answer: Sendable, Equatable {
        public var status: Int
        public var contentRange: String?
        public var contentLength: Int64?
        /// The response's range validator (a strong ETag, else Last-Modified).
        public var validator: String?
        public init(status: Int, contentRange: String? = nil, contentLength: Int64? = nil, validator: String? = nil) {
            self.status = status
            self.contentRange = contentRange
            self.contentLength = contentLength
            self.validator = validator
        }
    }

    public enum Decision: Sendable, Equatable {
        /// The body continues the partial at the asked offset; the partial now holds `validator`'s bytes.
        case append(validator: String?)
        /// The body is the whole file: the partial starts again from zero. `restart` says why, when
        /// bytes were kept that are now thrown away.
        case replace(validator: String?, restart: String?)
        /// The body must not be written: the partial is discarded and the attempt fails.
        case refuse(message: String, cause: FailureCause)
        /// An error status: the body is only read for the message; the status decides the outcome.
        case errorStatus
    }

    public static func decide(_ asked: Asked, _ answer: Answer) -> Decision {
        switch answer.status {
        case 206:
            guard asked.offset > 0, let value = answer.contentRange, let range = parseContentRange(value), range.first == asked.offset else {
                return .refuse(message: "the server answered the range request for bytes \(asked.offset)- with Content-Range '\(answer.contentRange ?? "none")'; starting again from zero",
                               cause: .rangeNotHonoured)
            }
            if let total = range.total, let size = asked.size, total != size {
                return .refuse(message: "the server says the file has \(total) bytes; the manifest says \(size)", cause: .wrongLength)
            }
            if let sent = answer.validator, let wanted = asked.ifRange, sent != wanted {
                return .refuse(message: "the server resumed a different version (validator \(sent), asked for \(wanted)); starting again from zero",
                               cause: .rangeNotHonoured)
            }
            return .append(validator: answer.validator ?? asked.ifRange)
        case 200:
            if let length = answer.contentLength, let size = asked.size, length != size {
                return .refuse(message: "the server says the file has \(length) bytes; the manifest says \(size)", cause: .wrongLength)
            }
            var restart: String?
            if asked.offset > 0 {
                restart = asked.ifRange == nil
                    ? "no validator to resume with; starting again from zero"
                    : "the server did not resume (200 to a range request, or the file changed); starting again from zero"
            }
            return .replace(validator: answer.validator, restart: restart)
        default:
            return .errorStatus
        }
    }

    /// Whether a response's validators (ETag, Last-Modified) may stand for its body later, in a
    /// conditional GET (`If-None-Match`, `If-Modified-Since`) or an `If-Range`. Not when its
    /// Last-Modified is less than a second older than its Date (RFC 9110 §8.8.2.2), or there is no
    /// Date to tell: the file may change again within that second and keep its mtime in seconds,
    /// and a server that derives its ETag from mtime and size (nginx) then answers the same ETag
    /// for other bytes. Without a Last-Modified, an ETag stands on its own.
    public static func validatorsHold(lastModified: Timestamp?, hasLastModified: Bool, date: Timestamp?) -> Bool {
        guard hasLastModified else { return true }
        guard let lastModified, let date else { return false }
        return date.timeInterval - lastModified.timeInterval >= 1
    }

    /// `bytes 100-199/1000` → (100, 199, 1000); the total may be `*` (nil).
    public static func parseContentRange(_ value: String) -> (first: Int64, last: Int64, total: Int64?)? {
        guard value.hasPrefix("bytes ") else { return nil }
        let rest = value.dropFirst(6)
        let halves = rest.split(separator: "/", maxSplits: 1)
        guard halves.count == 2 else { return nil }
        let span = halves[0].split(separator: "-", maxSplits: 1)
        guard span.count == 2, let first = Int64(span[0]), let last = Int64(span[1]), first <= last else { return nil }
        let total = halves[1] == "*" ? nil : Int64(halves[1])
        if halves[1] != "*" && total == nil { return nil }
        return (first, last, total)
    }
}
