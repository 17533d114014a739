/// Where a session keeps its files in the state directory beside the database: its cached
/// manifest, `<state>/manifests/<session>.manifest`, and the files named after it (`.new`,
/// `.objects/`, `.keys/`, `.index-map`...).
enum StatePaths {
    static func cachedManifest(state: String, session: String) -> String {
        state + "/manifests/" + session + ".manifest"
    }
}
