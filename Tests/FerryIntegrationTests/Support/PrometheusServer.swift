import Foundation

/// A real Prometheus (Debian's package) for a test: it scrapes the given agents' `/metrics` every
/// second, evaluates the rules every second, and answers instant queries over its HTTP API.
final class PrometheusServer {
    let port: UInt16
    private let child: Child
    private let log: String

    /// One sample of a query's answer: its labels and its value.
    struct Sample {
        let labels: [String: String]
        let value: Double
    }

    /// Starts Prometheus in `directory` scraping 127.0.0.1:`targets` (job "ferry") with `rules`.
    init(directory: String, targets: [UInt16], rules: [String]) throws {
        try FileManager.default.createDirectory(atPath: directory + "/data", withIntermediateDirectories: true)
        let list = targets.map { "\"127.0.0.1:\($0)\"" }.joined(separator: ", ")
        try """
            global:
              scrape_interval: 1s
              scrape_timeout: 1s
              evaluation_interval: 1s
            rule_files: [\(rules.map { "\"\($0)\"" }.joined(separator: ", "))]
            scrape_configs:
              - job_name: ferry
                static_configs:
                  - targets: [\(list)]

            """.writeReplacing(directory + "/prometheus.yml")
        let log = directory + "/prometheus.log"
        self.log = log
        let started = try startListening("prometheus", ports: 1, timeout: 60) { ports in
            let child = try Child("prometheus", ["--config.file=\(directory)/prometheus.yml", "--storage.tsdb.path=\(directory)/data",
                                                 "--web.listen-address=127.0.0.1:\(ports[0])", "--log.level=warn"],
                                  stdout: log, stderr: log)
            return (child, [log])
        }
        (port, child) = (started.ports[0], started.child)
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline && child.isRunning {
            if MetricsEndpointTests.get(port, "/-/ready", timeout: 2)?.status == 200 { return }
            usleep(50_000)
        }
        child.stop()
        throw TestFailure("prometheus did not become ready: \(fileContents(log) ?? "")")
    }

    deinit { child.stop() }

    func stop() { child.stop() }

    /// The log, for a failure's message.
    var output: String { fileContents(log) ?? "" }

    /// An instant query's vector (or scalar, as one sample with no labels); nil when Prometheus
    /// refused the query or did not answer. The request is HTTP/1.0 so the answer ends with the
    /// connection (no chunks).
    func query(_ expression: String) -> [Sample]? {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        guard let encoded = expression.addingPercentEncoding(withAllowedCharacters: allowed),
              let answer = MetricsEndpointTests.exchange(port, "GET /api/v1/query?query=\(encoded) HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"),
              answer.status == 200,
              let json = (try? JSONSerialization.jsonObject(with: Data(answer.body.utf8))) as? [String: Any],
              json["status"] as? String == "success", let data = json["data"] as? [String: Any] else { return nil }
        switch data["resultType"] as? String {
        case "vector":
            return (data["result"] as? [[String: Any]] ?? []).compactMap { row in
                guard let pair = row["value"] as? [Any], let text = pair.last as? String, let value = Double(text) else { return nil }
                return Sample(labels: row["metric"] as? [String: String] ?? [:], value: value)
            }
        case "scalar":
            guard let pair = data["result"] as? [Any], let text = pair.last as? String, let value = Double(text) else { return nil }
            return [Sample(labels: [:], value: value)]
        default:
            return nil
        }
    }

    /// Each target's value of `series`, by the target's port (the `instance` label).
    func byTarget(_ series: String) -> [UInt16: Double]? {
        guard let samples = query(series) else { return nil }
        var out: [UInt16: Double] = [:]
        for s in samples {
            if let port = s.labels["instance"].flatMap({ $0.split(separator: ":").last }).flatMap({ UInt16($0) }) { out[port] = s.value }
        }
        return out
    }
}
