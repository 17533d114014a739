import FerryCore

/// `file:///PATH/`: a directory on this machine (a mount, a staging tree), read and written
/// through `RemoteTree`. Checking what it holds is cheap, so a push does it on every run.
enum FileBackend: Backend {
    static let description = BackendDescription(
        name: "local directory", schemes: ["file"], example: "file:///srv/content/", called: "a file:// remote",
        transportKeys: [], credentialSources: ["the permissions of the directory"],
        abilities: [.rangedReads, .cheapInspection, .multipleRanges],
        checkAddress: { rest throws(ConfigProblem) in
            guard rest.hasPrefix("/") else { throw ConfigProblem("file:// URL needs an absolute path, like file:///srv/content/") }
        },
        localDirectory: { location in directory(of: location.url) })

    static func open(_ session: SessionConfig, clock: any Clock, stop: StopCondition?,
                     meter: FirstBytes.Meter?) throws(FerryError) -> Remote {
        FileRemote(base: session.remote, clock: clock)
    }

    /// The path a `file://` URL names (percent-decoded), or nil for anything else.
    static func directory(of url: String) -> String? {
        guard url.prefix(7).lowercased() == "file://" else { return nil }
        return String(url.dropFirst("file://".count)).removingPercentEncoding()
    }
}
