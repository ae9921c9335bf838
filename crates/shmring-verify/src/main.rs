//! `shmring-verify`: the reliability suite (see README, "Reliability").

fn main() {
    eprintln!("usage: shmring-verify <killstorm|scribble|consumer-crash|soak> ...");
    std::process::exit(2);
}
