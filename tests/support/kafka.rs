//! A Kafka broker of one test's own that can be restarted
//! (`infra/kafka-local.sh start --durable`): its topics, records and
//! consumer groups in a bucket of its own on moto's S3
//! (`AWS_ENDPOINT_URL_S3`), so they outlive the broker's process.

use std::path::Path;
use std::process::Command;

pub struct DurableBroker {
    /// `host:port`, as `KAFKA_BOOTSTRAP_SERVERS`.
    pub servers: String,
    dir: String,
}

impl DurableBroker {
    pub fn start() -> Self {
        super::env("AWS_ENDPOINT_URL_S3");
        let out = script(&["start", "--durable"], None);
        let exported = |name: &str| {
            out.lines()
                .find_map(|line| line.strip_prefix(&format!("export {name}=")))
                .unwrap_or_else(|| panic!("kafka-local.sh start printed no {name}: {out}"))
                .to_owned()
        };
        Self {
            servers: exported("KAFKA_BOOTSTRAP_SERVERS"),
            dir: exported("KAFKA_LOCAL_DIR"),
        }
    }

    /// Kills the broker (SIGKILL, as a crash) and starts it again on its
    /// port and storage; returns once it answers.
    pub fn restart(&self) {
        script(&["restart"], Some(&self.dir));
    }
}

impl Drop for DurableBroker {
    fn drop(&mut self) {
        script(&["stop"], Some(&self.dir));
    }
}

/// `infra/kafka-local.sh ARGS` (on the broker of `dir`): its stdout.
fn script(args: &[&str], dir: Option<&str>) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("infra/kafka-local.sh");
    let mut command = Command::new(&script);
    command.args(args);
    if let Some(dir) = dir {
        command.env("KAFKA_LOCAL_DIR", dir);
    }
    let out = command.output().expect("run infra/kafka-local.sh");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() || std::thread::panicking(),
        "infra/kafka-local.sh {}: {}",
        args.join(" "),
        out.status
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
