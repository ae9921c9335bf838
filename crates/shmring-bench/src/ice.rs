//! The `iceoryx2` transport: zero-copy publish/subscribe (loan a slice, fill it in
//! place, send; read the sample in place) plus an event service so the subscriber
//! blocks instead of polling.

use std::time::Duration;

use iceoryx2::prelude::*;

use crate::args::{Role, WorkerArgs};
use crate::kit::{produce, ready, Checker, Res};
use crate::meeting::{self, Streams};
use crate::report::WorkerReport;
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

/// Opens (or creates) the service for `publishers` publishers, each a notifier of
/// the event service, with a subscriber queue of `depth` samples.
fn open(a: &WorkerArgs, publishers: usize, depth: usize) -> Res<Ports> {
    let name = a.service.as_deref().ok_or("--service is required")?;
    set_log_level(LogLevel::Error);
    let node = NodeBuilder::new()
        .create::<ipc::Service>()
        .map_err(|x| e("node")(&x))?;
    // Workers killed after a failure cannot clean up after themselves: remove what
    // dead nodes left behind.
    let _ = node.try_cleanup_dead_nodes();
    let sname: ServiceName = name.try_into().map_err(|x| e("service name")(&x))?;
    let service = node
        .service_builder(&sname)
        .publish_subscribe::<[u8]>()
        .user_header::<Header>()
        .enable_safe_overflow(false)
        .subscriber_max_buffer_size(depth)
        .subscriber_max_borrowed_samples(2)
        .history_size(0)
        .max_publishers(publishers)
        .max_subscribers(1)
        // A node per publisher (each sending thread opens its own) and the
        // subscriber's: past iceoryx2's default, more threads are refused.
        .max_nodes(publishers + 1)
        .open_or_create()
        .map_err(|x| e("publish-subscribe service")(&x))?;
    let ename: ServiceName = format!("{name}.event")
        .as_str()
        .try_into()
        .map_err(|x| e("service name")(&x))?;
    let event = node
        .service_builder(&ename)
        .event()
        .max_notifiers(publishers)
        .max_nodes(publishers + 1)
        .open_or_create()
        .map_err(|x| e("event service")(&x))?;
    Ok(Ports {
        _node: node,
        service,
        event,
    })
}

/// Queue depth: as many records of `size` bytes as the shmring ring holds, within reason.
fn depth(a: &WorkerArgs, size: usize) -> usize {
    ((a.ring_mib << 20) as usize / size.max(1)).clamp(2, 256)
}

/// One publisher and its notifier, for records of up to `size` bytes.
struct Sender {
    _ports: Ports,
    publisher: iceoryx2::port::publisher::Publisher<ipc::Service, [u8], Header>,
    notifier: iceoryx2::port::notifier::Notifier<ipc::Service>,
}

impl Sender {
    fn new(ports: Ports, size: usize) -> Res<Sender> {
        let publisher = ports
            .service
            .publisher_builder()
            .initial_max_slice_len(size.max(8))
            .max_loaned_samples(1)
            .backpressure_strategy(BackpressureStrategy::RetryUntilDelivered)
            .create()
            .map_err(|x| e("publisher")(&x))?;
        let notifier = ports
            .event
            .notifier_builder()
            .create()
            .map_err(|x| e("notifier")(&x))?;
        Ok(Sender {
            _ports: ports,
            publisher,
            notifier,
        })
    }

    /// Sends one `size`-byte sample written by `fill`, with `header`.
    ///
    /// iceoryx2 attaches a subscriber to a new publisher only when the subscriber
    /// next looks (receive); until then, once the subscriber's queue is full, `send`
    /// discards the sample, even with RetryUntilDelivered, and says so only by
    /// returning 0 recipients. So a sample that reached nobody is sent again; it is
    /// never counted as moved.
    fn send(&self, size: usize, header: Header, fill: &mut dyn FnMut(&mut [u8])) -> Res<()> {
        let first = shmring::now_ns();
        loop {
            let mut sample = self
                .publisher
                .loan_slice_uninit(size)
                .map_err(|x| e("loan")(&x))?;
            let payload = sample.payload_mut();
            // SAFETY: u8 has no invalid values; `fill` writes every byte before assume_init.
            let buf = unsafe {
                std::slice::from_raw_parts_mut(payload.as_mut_ptr() as *mut u8, payload.len())
            };
            fill(buf);
            *sample.user_header_mut() = [header[0], shmring::now_ns(), header[2]];
            // SAFETY: every byte was written above.
            let sample = unsafe { sample.assume_init() };
            let delivered = sample.send().map_err(|x| e("send")(&x))?;
            self.notifier.notify().map_err(|x| e("notify")(&x))?;
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
    }
}

pub fn producer(a: &WorkerArgs) -> Res<WorkerReport> {
    let tx = Sender::new(open(a, 1, depth(a, a.size))?, a.size)?;
    let rep = produce(a, |pacer, seq| {
        tx.send(a.size, [seq, 0, 0], &mut |b| pacer.make(b, seq))
    })?;
    tx.send(a.size, [0, 0, END], &mut |b| b.fill(0))
        .map_err(|x| format!("end of stream: {x}"))?;
    Ok(rep)
}

/// The subscriber's loop: every sample to `on(header, payload, arrival)` until it
/// returns true (the end).
fn receive(
    a: &WorkerArgs,
    ports: Ports,
    ck: &mut Checker,
    mut on: impl FnMut(&mut Checker, Header, &[u8], u64) -> bool,
) -> Res<()> {
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
    let _ = a;
    ready();
    ck.begin();
    let stall = STALL.as_nanos() as u64;
    let mut last = shmring::now_ns();
    loop {
        while let Some(sample) = subscriber.receive().map_err(|x| e("receive")(&x))? {
            let now = shmring::now_ns();
            last = now;
            if on(ck, *sample.user_header(), sample.payload(), now) {
                return Ok(());
            }
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

pub fn consumer(a: &WorkerArgs) -> Res<WorkerReport> {
    let ports = open(a, 1, depth(a, a.size))?;
    let mut ck = Checker::new(a.size);
    receive(a, ports, &mut ck, |ck, [seq, ts, flags], payload, now| {
        if flags & END != 0 {
            return true;
        }
        ck.frame(seq, u64::MAX, ts, now, payload);
        false
    })?;
    Ok(ck.finish())
}

// ---- the meeting: one publisher per sending thread, one subscriber ----

/// The meeting's service: every stream's thread publishes on it; the queue holds
/// what the ring holds of its largest records.
fn meeting_ports(a: &WorkerArgs, plan: &Streams) -> Res<Ports> {
    open(a, plan.count(), depth(a, plan.largest()))
}

/// The third header word: flags, and the stream in the upper half.
fn tag(stream: usize, flags: u64) -> u64 {
    ((stream as u64) << 32) | flags
}

/// One side of the meeting (or of `--scale producers`: the same, threads of one size).
pub fn meeting(a: &WorkerArgs, role: Role) -> Res<WorkerReport> {
    let plan = Streams::of(a)?;
    match role {
        Role::Producer => meeting_producer(a, &plan),
        Role::Consumer => meeting_consumer(a, &plan),
        Role::Floor => Err("iceoryx2 has no floor".into()),
    }
}

fn meeting_producer(a: &WorkerArgs, plan: &Streams) -> Res<WorkerReport> {
    meeting::produce_streams(
        a,
        plan,
        plan.of_part(a.part),
        |stream| Sender::new(meeting_ports(a, plan)?, plan.size(stream)),
        |tx, pacer, stream, seq| {
            tx.send(plan.size(stream), [seq, 0, tag(stream, 0)], &mut |b| {
                pacer.make(b, seq)
            })
        },
        |tx, stream| tx.send(8, [0, 0, tag(stream, END)], &mut |b| b.fill(0)),
    )
}

fn meeting_consumer(a: &WorkerArgs, plan: &Streams) -> Res<WorkerReport> {
    let ports = meeting_ports(a, plan)?;
    let mut ck = Checker::streams(plan.sizes());
    receive(a, ports, &mut ck, |ck, [seq, ts, word], payload, now| {
        let stream = (word >> 32) as usize;
        if word & END != 0 {
            ck.end(stream);
            return ck.all_ended();
        }
        ck.frame_on(stream, seq, u64::MAX, ts, now, payload);
        false
    })?;
    Ok(ck.finish())
}
