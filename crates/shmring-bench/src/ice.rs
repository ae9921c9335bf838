//! The `iceoryx2` transport: zero-copy publish/subscribe (loan a slice, fill it in
//! place, send; read the sample in place) plus an event service so the subscriber
//! blocks instead of polling.

use std::time::Duration;

use iceoryx2::prelude::*;

use crate::args::WorkerArgs;
use crate::report::WorkerReport;
use crate::transports::{produce, ready, Checker};

type Res<T> = Result<T, String>;
/// User header: [sequence, send timestamp, flags].
type Header = [u64; 3];
const END: u64 = 1;
const STALL: Duration = Duration::from_secs(10);

fn e(what: &str) -> impl Fn(&dyn std::fmt::Display) -> String + '_ {
    move |err| format!("{what}: {err}")
}

struct Ports {
    _node: Node<ipc::Service>,
    service:
        iceoryx2::service::port_factory::publish_subscribe::PortFactory<ipc::Service, [u8], Header>,
    event: iceoryx2::service::port_factory::event::PortFactory<ipc::Service>,
}

fn open(a: &WorkerArgs) -> Res<Ports> {
    let name = a.service.as_deref().ok_or("--service is required")?;
    set_log_level(LogLevel::Error);
    let node = NodeBuilder::new()
        .create::<ipc::Service>()
        .map_err(|x| e("node")(&x))?;
    // Workers killed after a failure cannot clean up after themselves: remove what
    // dead nodes left behind.
    let _ = node.try_cleanup_dead_nodes();
    // Queue depth: as many frames as the shmring ring holds, within reason.
    let depth = ((a.ring_mib << 20) as usize / a.size.max(1)).clamp(2, 256);
    let sname: ServiceName = name.try_into().map_err(|x| e("service name")(&x))?;
    let service = node
        .service_builder(&sname)
        .publish_subscribe::<[u8]>()
        .user_header::<Header>()
        .enable_safe_overflow(false)
        .subscriber_max_buffer_size(depth)
        .subscriber_max_borrowed_samples(2)
        .history_size(0)
        .max_publishers(1)
        .max_subscribers(1)
        .open_or_create()
        .map_err(|x| e("publish-subscribe service")(&x))?;
    let ename: ServiceName = format!("{name}.event")
        .as_str()
        .try_into()
        .map_err(|x| e("service name")(&x))?;
    let event = node
        .service_builder(&ename)
        .event()
        .open_or_create()
        .map_err(|x| e("event service")(&x))?;
    Ok(Ports {
        _node: node,
        service,
        event,
    })
}

pub fn producer(a: &WorkerArgs) -> Res<WorkerReport> {
    let ports = open(a)?;
    let publisher = ports
        .service
        .publisher_builder()
        .initial_max_slice_len(a.size.max(8))
        .max_loaned_samples(1)
        .backpressure_strategy(BackpressureStrategy::RetryUntilDelivered)
        .create()
        .map_err(|x| e("publisher")(&x))?;
    let notifier = ports
        .event
        .notifier_builder()
        .create()
        .map_err(|x| e("notifier")(&x))?;
    // iceoryx2 attaches a subscriber to a new publisher only when the subscriber
    // next looks (receive); until then, once the subscriber's queue is full, `send`
    // discards the sample, even with RetryUntilDelivered, and says so only by
    // returning 0 recipients. So a sample that reached nobody is sent again; it is
    // never counted as moved.
    let send = |seq: u64, flags: u64, fill: &mut dyn FnMut(&mut [u8])| -> Res<()> {
        let first = shmring::now_ns();
        loop {
            let mut sample = publisher
                .loan_slice_uninit(a.size)
                .map_err(|x| e("loan")(&x))?;
            let payload = sample.payload_mut();
            // SAFETY: u8 has no invalid values; `fill` writes every byte before assume_init.
            let buf = unsafe {
                std::slice::from_raw_parts_mut(payload.as_mut_ptr() as *mut u8, payload.len())
            };
            fill(buf);
            *sample.user_header_mut() = [seq, shmring::now_ns(), flags];
            // SAFETY: every byte was written above.
            let sample = unsafe { sample.assume_init() };
            let delivered = sample.send().map_err(|x| e("send")(&x))?;
            notifier.notify().map_err(|x| e("notify")(&x))?;
            if delivered > 0 {
                return Ok(());
            }
            if shmring::now_ns().saturating_sub(first) >= STALL.as_nanos() as u64 {
                return Err(format!(
                    "no subscriber took a sample for {} s",
                    STALL.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    };
    let rep = produce(a, |pacer, seq| send(seq, 0, &mut |b| pacer.make(b, seq)))?;
    send(0, END, &mut |b| b.fill(0)).map_err(|x| format!("end of stream: {x}"))?;
    Ok(rep)
}

pub fn consumer(a: &WorkerArgs) -> Res<WorkerReport> {
    let ports = open(a)?;
    let subscriber = ports
        .service
        .subscriber_builder()
        .create()
        .map_err(|x| e("subscriber")(&x))?;
    let listener = ports
        .event
        .listener_builder()
        .create()
        .map_err(|x| e("listener")(&x))?;
    let mut ck = Checker::new(a.size);
    ready();
    ck.begin();
    let stall = STALL.as_nanos() as u64;
    let mut last = shmring::now_ns();
    loop {
        while let Some(sample) = subscriber.receive().map_err(|x| e("receive")(&x))? {
            let now = shmring::now_ns();
            last = now;
            let [seq, ts, flags] = *sample.user_header();
            if flags & END != 0 {
                return Ok(ck.finish());
            }
            ck.frame(seq, u64::MAX, ts, now, sample.payload());
        }
        if shmring::now_ns().saturating_sub(last) >= stall {
            return Err(format!(
                "no sample for {} s after {} samples",
                STALL.as_secs(),
                ck.frames()
            ));
        }
        // The listener may return with no notification (its notified flag can be
        // left set by a notifier racing with the previous drain): that is not a
        // timeout, only a reason to look again.
        listener
            .timed_wait(|_| {}, STALL)
            .map_err(|x| e("wait")(&x))?;
    }
}
