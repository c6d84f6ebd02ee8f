//! The launcher (`cacheline proxy -- CMD`) runs a command as a shell would, and says so in
//! its errors: a command that does not exist is 127, one that cannot be executed 126.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;

use cacheline_proxy::ProxyError;
use cacheline_proxy::launcher::{self, NOT_EXECUTABLE, NOT_FOUND};

fn addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9))
}

/// A directory of this test process, `name`d.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("cacheline-launcher-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_cannot_be_run_carries_the_exit_code_a_shell_gives() {
    let dir = scratch("codes");
    // Not found: a name on no PATH, and a path that does not exist.
    for missing in [
        "cacheline-no-such-command-0d1f".into(),
        dir.join("absent").into_os_string(),
    ] {
        let e = launcher::run(&missing, &[], addr()).await.unwrap_err();
        assert!(matches!(e, ProxyError::Command { .. }), "{e}");
        assert_eq!(e.shell_exit_code(), Some(NOT_FOUND), "{e}");
        assert_eq!(NOT_FOUND, 127);
    }
    // Not executable: a file without the execute bit, and a directory.
    let script = dir.join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    for cannot in [script.into_os_string(), dir.clone().into_os_string()] {
        let e = launcher::run(&cannot, &[], addr()).await.unwrap_err();
        assert_eq!(e.shell_exit_code(), Some(NOT_EXECUTABLE), "{e}");
        assert_eq!(NOT_EXECUTABLE, 126);
    }
    // A command that runs gives its own code, as a shell would.
    let code = launcher::run(&"sh".into(), &["-c".into(), "exit 7".into()], addr())
        .await
        .unwrap();
    assert_eq!(code, 7);
    // Errors other than the command's are not a shell's.
    let bind = ProxyError::LocalAddr(std::io::Error::from(std::io::ErrorKind::NotFound));
    assert_eq!(bind.shell_exit_code(), None);
    std::fs::remove_dir_all(&dir).unwrap();
}
