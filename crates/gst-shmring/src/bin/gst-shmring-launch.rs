//! `gst-shmring-launch PIPELINE...`: runs a pipeline in `gst-launch-1.0` syntax with
//! the shmring elements registered (no plugin path needed) until EOS or an error,
//! then prints the counters of every shmring element, one `element property=value`
//! line each. Exit status: 0 at EOS, 1 on an error (printed), 2 on bad usage.

use std::process::ExitCode;

use gst::prelude::*;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args[0] == "--help" || args[0] == "-h" {
        eprintln!("usage: gst-shmring-launch PIPELINE (gst-launch-1.0 syntax)");
        return ExitCode::from(2);
    }
    if let Err(e) = gst::init() {
        eprintln!("gst-shmring-launch: cannot initialise GStreamer: {e}");
        return ExitCode::from(1);
    }
    if let Err(e) = gstshmring::plugin_register_static() {
        eprintln!("gst-shmring-launch: cannot register the shmring elements: {e}");
        return ExitCode::from(1);
    }
    let pipeline = match gst::parse::launch(&args.join(" ")) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gst-shmring-launch: bad pipeline: {e}");
            return ExitCode::from(2);
        }
    };
    let code = run(&pipeline);
    let _ = pipeline.set_state(gst::State::Null);
    if let Some(bin) = pipeline.downcast_ref::<gst::Bin>() {
        for e in bin.iterate_recurse().into_iter().flatten() {
            let factory = e
                .factory()
                .map(|f| f.name().to_string())
                .unwrap_or_default();
            if !factory.starts_with("shmring") {
                continue;
            }
            for p in e.list_properties() {
                if !p.flags().contains(gst::glib::ParamFlags::WRITABLE) {
                    if let Ok(v) = e.property_value(p.name()).get::<u64>() {
                        println!("{} {}={v}", e.name(), p.name());
                    }
                }
            }
        }
    }
    code
}

fn run(pipeline: &gst::Element) -> ExitCode {
    if let Err(e) = pipeline.set_state(gst::State::Playing) {
        eprintln!("gst-shmring-launch: cannot start the pipeline: {e}");
        if let Some(bus) = pipeline.bus() {
            while let Some(msg) = bus.pop_filtered(&[gst::MessageType::Error]) {
                if let gst::MessageView::Error(err) = msg.view() {
                    eprintln!("gst-shmring-launch: {}", err.error());
                }
            }
        }
        return ExitCode::from(1);
    }
    let bus = pipeline.bus().expect("a pipeline has a bus");
    for msg in bus.iter_timed(gst::ClockTime::NONE) {
        match msg.view() {
            gst::MessageView::Eos(_) => return ExitCode::SUCCESS,
            gst::MessageView::Error(err) => {
                eprintln!(
                    "gst-shmring-launch: error from {}: {} ({})",
                    err.src()
                        .map(|s| s.path_string().to_string())
                        .unwrap_or_default(),
                    err.error(),
                    err.debug().map(|d| d.to_string()).unwrap_or_default()
                );
                return ExitCode::from(1);
            }
            gst::MessageView::Warning(w) => {
                eprintln!(
                    "gst-shmring-launch: warning from {}: {}",
                    w.src()
                        .map(|s| s.path_string().to_string())
                        .unwrap_or_default(),
                    w.error()
                );
            }
            _ => {}
        }
    }
    ExitCode::SUCCESS
}
