import CCurl
import Glibc
import FerryCore

/// Runs downloads through one libcurl multi handle: up to `concurrency` at once, connections kept
/// alive and reused, HTTP/2 multiplexed over TLS. Everything happens on the calling thread; the
/// caller's closures see each download start, checkpoint and finish, in order.
final class DownloadEngine {
    private let multi: UnsafeMutableRawPointer
    private let settings: HTTPSettings
    private let concurrency: Int
    private var idle: [EasyHandle] = []
    /// Checkpoints: every 2 MiB, or every second for slower transfers, a transfer's data is
    /// fdatasync'ed and its length recorded, which bounds what a crash makes ferry fetch again.
    static let checkpointInterval: Int64 = 2 << 20
    static let checkpointSeconds = 1.0

    init(settings: HTTPSettings, concurrency: Int) {
        self.settings = settings
        self.concurrency = max(1, concurrency)
        multi = curl_multi_init()
        ferry_multi_setopt_long(multi, CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX))
        ferry_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, self.concurrency * 2)
    }

    deinit {
        idle.removeAll()
        curl_multi_cleanup(multi)
    }

    private struct Active {
        let easy: EasyHandle
        let download: Download
        let retained: Unmanaged<Download>
    }

    /// What the caller has for the engine next.
    enum Next {
        case start(Download)
        /// Nothing is due yet (retries are waiting out their backoff); ask again shortly.
        case notYet
        /// Nothing more will come.
        case none
    }

    /// Pulls downloads from `next` until it returns `.none` and all have finished, or until
    /// `shouldStop` says so (then the running ones end as `.interrupted`).
    func run(next: () -> Next,
             onCheckpoint: @escaping (Download) -> Void,
             onFinish: ([(Download, Download.Outcome)]) -> Void,
             onTick: ([Download]) -> Void,
             shouldStop: () -> Bool) {
        var active: [UnsafeMutableRawPointer: Active] = [:]
        var exhausted = false
        var finished: [(Download, Download.Outcome)] = []
        var lastTick = 0.0
        /// Progress, suspensions and group commits: at most ten times a second.
        func tick(at now: Double) {
            guard now - lastTick >= 0.1 else { return }
            lastTick = now
            onTick(active.values.map(\.download))
        }

        while true {
            if shouldStop() {
                for (handle, a) in active {
                    curl_multi_remove_handle(multi, handle)
                    finished.append((a.download, .interrupted))
                    a.retained.release()
                    idle.append(a.easy)
                }
                active.removeAll()
                if !finished.isEmpty { onFinish(finished) }
                return
            }
            for (handle, a) in active where a.download.cancelRequested {
                curl_multi_remove_handle(multi, handle)
                active.removeValue(forKey: handle)
                finished.append((a.download, .interrupted))
                a.retained.release()
                idle.append(a.easy)
            }
            var waiting = false
            while !exhausted && !waiting && active.count < concurrency {
                let download: Download
                switch next() {
                case .start(let d): download = d
                case .notYet:
                    waiting = true
                    continue
                case .none:
                    exhausted = true
                    continue
                }
                if download.isAlreadyComplete {
                    finished.append((download, download.verify()))
                    continue
                }
                download.onCheckpoint = onCheckpoint
                let easy = idle.popLast() ?? EasyHandle()
                let retained = Unmanaged.passRetained(download)
                configure(easy, for: download, context: retained.toOpaque())
                curl_multi_add_handle(multi, easy.handle)
                active[easy.handle] = Active(easy: easy, download: download, retained: retained)
            }
            if active.isEmpty {
                if !finished.isEmpty {
                    onFinish(finished)
                    finished.removeAll()
                    exhausted = false
                    continue
                }
                if exhausted { break }
                if waiting {
                    // Everything waits out a backoff: keep ticking, so `ferry cancel` is still heard.
                    tick(at: MonotonicClock.seconds())
                    usleep(20_000)
                }
                continue
            }

            var running: Int32 = 0
            curl_multi_perform(multi, &running)
            var left: Int32 = 0
            while let message = curl_multi_info_read(multi, &left) {
                guard ferry_msg_is_done(message) != 0, let handle = ferry_msg_easy(message), let a = active.removeValue(forKey: handle) else { continue }
                let code = ferry_msg_result(message)
                curl_multi_remove_handle(multi, handle)
                finished.append((a.download, a.download.finish(code: code, errorText: a.easy.errorText)))
                a.retained.release()
                idle.append(a.easy)
            }
            if !finished.isEmpty {
                onFinish(finished)
                finished.removeAll()
                exhausted = false  // a failure may have scheduled a retry
            }
            let now = MonotonicClock.seconds()
            for a in active.values where a.download.written > a.download.checkpointed
                && now - a.download.checkpointTime >= DownloadEngine.checkpointSeconds {
                a.download.takeCheckpoint()
            }
            tick(at: now)
            if !active.isEmpty && running > 0 {
                var numfds: Int32 = 0
                curl_multi_poll(multi, nil, 0, 100, &numfds)
            }
        }
    }

    private func configure(_ easy: EasyHandle, for download: Download, context: UnsafeMutableRawPointer) {
        easy.configure(url: download.url, settings: settings, extraHeaders: download.requestHeaders)
        if let range = download.rangeOption { easy.set(CURLOPT_RANGE, range) }
        if (download.entry.size ?? 0) > 1 << 20 { easy.set(CURLOPT_BUFFERSIZE, 512 * 1024) }
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_WRITEFUNCTION, downloadWriteCallback)
        easy.set(CURLOPT_WRITEDATA, pointer: context)
        ferry_easy_setopt_datacb(easy.handle, CURLOPT_HEADERFUNCTION, downloadHeaderCallback)
        easy.set(CURLOPT_HEADERDATA, pointer: context)
    }
}
