import CCurl
import FerryCore

/// How a `Download` asks for its bytes and takes them in, while the download keeps the partial
/// file, its hash and checkpoints, and judges the whole at the end:
/// - the whole file (`WholeFile`): one request from an offset under a validator, or the steps of
///   a source that reads the remote itself;
/// - ranges (`DeltaAssembly` with the file as one object): a new version assembled piece by
///   piece from local bytes and ranges of the remote's file;
/// - pieces (`DeltaAssembly` with a file stored as its pieces): the same, each piece an object
///   of its own.
/// Every call comes on the engine's thread, through the download it belongs to.
protocol DownloadStrategy: AnyObject {
    var kind: DownloadKind { get }
    /// How the engine runs the download's next request or steps.
    func mode(of download: Download) -> TransferMode
    /// Read when a request or steps end `.succeeded`: the download goes on (`Transfer.continues`).
    var continues: Bool { get }
    func waitingOn(of download: Download) -> (fd: Int32, events: Int16)?
    /// As a request or steps start (`Transfer.outcomeWithoutRequest`).
    func begin(_ download: Download) -> TransferOutcome?
    func prepare(_ download: Download, _ easy: EasyHandle, context: UnsafeMutableRawPointer)
    /// Body bytes from libcurl: `count` to go on, 0 to end the request.
    func receive(_ download: Download, _ bytes: UnsafeRawPointer, count: Int) -> Int
    func finish(_ download: Download, code: CURLcode, errorText: String?) -> TransferOutcome
    func step(_ download: Download) -> TransferOutcome?
    /// Bytes taken from local files by this attempt.
    var reused: Int64 { get }
    /// Why a delta stopped (the file is fetched whole next), when it did.
    var stopped: DeltaStop? { get }
    /// The download is done: what the strategy holds goes (sources, buffers).
    func close(_ download: Download)
}

/// Why a delta stopped: its reason as events and metrics name it, and what happened.
struct DeltaStop {
    let reason: DeltaFallback
    let why: String
}

/// Which strategy a download has.
enum DownloadKind {
    case wholeFile
    case ranges
    case pieces
}
