// swift-tools-version:6.0
// ferry: no Swift package dependencies. System C libraries only (libcurl, SQLite, libcrypto, libssh2, libzstd,
// glibc).
import PackageDescription

let package = Package(
    name: "ferry",
    products: [
        .executable(name: "ferry", targets: ["ferry"]),
    ],
    targets: [
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CSSH2", pkgConfig: "libssh2", providers: [.apt(["libssh2-1-dev"])]),
        // Pieces stored compressed (remote-layout = objects).
        .systemLibrary(name: "CZstd", pkgConfig: "libzstd", providers: [.apt(["libzstd-dev"])]),
        // glibc calls Swift's Glibc module leaves out (closefrom for spawned hooks, prctl).
        .systemLibrary(name: "CSystem"),
        // Pure domain: config, manifest, plan, task model, events, errors. No I/O.
        .target(name: "FerryCore", linkerSettings: [.linkedLibrary("m")]),
        // The only code that touches network, disk and SQLite.
        .target(name: "FerryRuntime", dependencies: ["FerryCore", "CCurl", "CSQLite", "CCrypto", "CSystem", "CSSH2",
                                                        "CZstd"]),
        // One file per command; argument parsing; terminal output.
        .target(name: "FerryCLI", dependencies: ["FerryCore", "FerryRuntime"]),
        .executableTarget(name: "ferry", dependencies: ["FerryCLI"]),
        .testTarget(name: "FerryCoreTests", dependencies: ["FerryCore", "FerryRuntime"]),
        .testTarget(name: "FerryIntegrationTests", dependencies: ["FerryCore", "FerryRuntime", "ferry"]),
    ]
)
