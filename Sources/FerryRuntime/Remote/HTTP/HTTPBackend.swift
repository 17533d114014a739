import FerryCore

/// `http://` and `https://`: reads with GET (ranged, under a validator), publishes over WebDAV.
enum HTTPBackend: Backend {
    static let description = BackendDescription(
        name: "HTTP/WebDAV", schemes: ["https", "http"], example: "https://HOST/PATH/", called: "an http(s):// remote",
        transportKeys: Set(ConfigKey.transport),
        credentialSources: ["basic-auth-file (user:password)", "bearer-token-file", "none"],
        abilities: [.rangedReads, .multipleRanges],
        checkAddress: { rest throws(ConfigProblem) in
            let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
            guard !authority.isEmpty else { throw ConfigProblem("URL has no host") }
            if authority.contains("@") {
                throw ConfigProblem("URL carries credentials; put them in a file named by basic-auth-file instead")
            }
        })

    static func open(_ session: SessionConfig, clock: any Clock, stop: StopCondition?,
                     meter: FirstBytes.Meter?) throws(FerryError) -> Remote {
        var settings = try HTTPSettings.of(session)
        settings.stop = stop
        settings.meter = meter
        return HTTPRemote(base: session.remote, settings: settings, clock: clock)
    }
}
