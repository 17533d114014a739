/// What becomes of a delayed task when it comes due, decided against the newest manifest — ferry's
/// `willBeginDelayedRequest` (continue / use new request / cancel).
public enum DelayedRequest {
    public enum Disposition: String, Sendable {
        /// The file is as it was when the task was delayed: go on (with any resume data).
        case proceed = "continue"
        /// The file changed (size, hash or URL): fetch the new one, from zero.
        case replace
        /// The file is gone from the manifest, or already in place: drop the task.
        case cancel
    }

    /// `entry` is the newest manifest's entry for the task's path (nil when it is gone);
    /// `url` is where that entry would be fetched from now.
    public static func disposition(for task: TransferTask, entry: ManifestEntry?, url: String?) -> (Disposition, String) {
        guard let entry else { return (.cancel, "the file is no longer in the manifest") }
        if entry.sha256.hex != task.sha256 || entry.size != task.size {
            return (.replace, "the file changed (size \(entry.size.map(String.init) ?? "?"), sha256 \(entry.sha256.hex.prefix(12))…)")
        }
        if let old = task.url, let url, old != url { return (.replace, "the file moved to \(url)") }
        return (.proceed, "unchanged since it was delayed")
    }
}
