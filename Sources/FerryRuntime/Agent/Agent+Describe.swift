import FerryCore

extension Agent {
    /// What the agent says of a session after a cycle.
    static func describe(_ result: SyncResult, outcome: PollSchedule.Outcome) -> PollState {
        switch outcome {
        case .reached:
            if let heldFor = result.counts.heldFor { return .held("\(Plural.count(result.counts.held, "file")) \(result.counts.held == 1 ? "waits" : "wait") for \(heldFor)") }
            return .idle
        case .busy:
            return .busy
        case .failed:
            // Only what connectivity can cure is "waiting": a refusal (HTTP 409, 403, a manifest
            // that does not parse) is a failure that says what failed.
            if result.error?.cause?.isConnectivity == true || result.counts.waiting > 0 {
                return .waiting(result.message ?? "the remote could not be reached")
            }
            return .failed(result.message ?? "exit code \(result.exitCode.rawValue)")
        }
    }
}
