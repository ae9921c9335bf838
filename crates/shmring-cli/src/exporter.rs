//! `shmring exporter`: serves `/metrics` (Prometheus text, see [`crate::metrics`])
//! over HTTP with `tiny_http`, reading the named rings afresh on every scrape; rings
//! on sockets (`--sockets DIR`) are observed as in `shmring top`, the connection kept
//! between scrapes.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tiny_http::{Header, Method, Response, Server};

use crate::cli::ExporterArgs;
use crate::metrics::{encode_readings, CONTENT_TYPE};
use crate::rings::{NamedRings, RingSource, SocketRings};
use crate::{fail, stop_flag, CmdError};

/// `shmring exporter`: serves until SIGINT/SIGTERM.
pub fn run(a: ExporterArgs) -> Result<(), CmdError> {
    let stop = stop_flag()?;
    let mut named = NamedRings::from(&a.rings);
    // Sockets are connected to in the background and kept between scrapes; the
    // first connections are made before serving, so the first scrape has them.
    let mut sockets =
        (!a.rings.sockets.is_empty()).then(|| SocketRings::new(a.rings.sockets.clone()));
    if let Some(s) = &mut sockets {
        s.settle();
    }
    let server = Server::http(&a.listen)
        .map_err(|e| fail(1, format!("cannot listen on {}: {e}", a.listen)))?;
    let addr = server
        .server_addr()
        .to_ip()
        .map_or_else(|| a.listen.clone(), |s| s.to_string());
    {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "shmring exporter: serving http://{addr}/metrics");
        let _ = o.flush();
    }
    let content_type =
        Header::from_bytes("Content-Type", CONTENT_TYPE).expect("a valid header is accepted");
    while !stop.load(Ordering::Relaxed) {
        let req = match server.recv_timeout(Duration::from_millis(200)) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => return Err(fail(1, format!("serving {addr}: {e}"))),
        };
        let path = req.url().split('?').next().unwrap_or("");
        let resp = match (req.method(), path) {
            (Method::Get, "/metrics") => {
                let mut readings = named.scan();
                if let Some(s) = &mut sockets {
                    readings.extend(s.scan());
                }
                Response::from_string(encode_readings(&readings)).with_header(content_type.clone())
            }
            (Method::Get, "/") => {
                Response::from_string("shmring exporter: the metrics are at /metrics\n")
            }
            _ => Response::from_string("not found: the metrics are at /metrics\n")
                .with_status_code(404),
        };
        // A client that hung up is its own problem.
        let _ = req.respond(resp);
    }
    Ok(())
}
