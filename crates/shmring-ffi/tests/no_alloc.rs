//! The producer path of the C ABI allocates nothing after attach (and neither does
//! the consumer's next/release): counted with a global allocator that tallies the
//! allocations of each thread (`shmring_host::CountingAlloc`).

use std::ptr;

use shmring_ffi::shmring_status::*;
use shmring_ffi::*;

#[global_allocator]
static A: shmring_host::CountingAlloc = shmring_host::CountingAlloc;

/// Allocations made by `f` on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = shmring_host::thread_alloc_count();
    f();
    shmring_host::thread_alloc_count() - before
}

#[test]
fn producer_and_consumer_hot_paths_do_not_allocate() {
    // SAFETY: the C ABI as shmring.h says: every pointer handed in is to a local
    // of ours or a handle the library returned and not yet closed.
    unsafe {
        let mut cfg = std::mem::zeroed();
        assert_eq!(shmring_config_init(&mut cfg), SHMRING_OK);
        cfg.capacity = 4 << 20;
        let mut seg = ptr::null_mut();
        assert_eq!(
            shmring_create(c"memfd:noalloc".as_ptr(), &cfg, &mut seg),
            SHMRING_OK
        );
        let (mut p, mut c) = (ptr::null_mut(), ptr::null_mut());
        assert_eq!(
            shmring_consumer_attach(seg, ptr::null(), &mut c),
            SHMRING_OK
        );
        assert_eq!(shmring_producer_attach(seg, &mut p), SHMRING_OK);
        let mut hdr = std::mem::zeroed();
        assert_eq!(
            shmring_media_video(SHMRING_FORMAT_I420, 320, 240, 0, 0, &mut hdr),
            SHMRING_OK
        );
        let mut len = 0usize;
        assert_eq!(shmring_media_payload_len(&hdr, &mut len), SHMRING_OK);
        let bytes = vec![7u8; 1000];
        let mut frames = 0;
        let n = allocations(|| {
            for i in 0..2000u64 {
                let mut r = std::mem::zeroed::<shmring_reservation>();
                assert_eq!(shmring_producer_reserve(p, len, &mut r), SHMRING_OK);
                hdr.sequence = i;
                assert_eq!(shmring_media_write(&hdr, r.data, r.len), SHMRING_OK);
                let meta = shmring_meta {
                    stream: 1,
                    kind: SHMRING_KIND_VIDEO,
                    timestamp_ns: shmring_now_ns(),
                    flags: 0,
                    reserved: 0,
                };
                if i % 10 == 0 {
                    assert_eq!(shmring_producer_abort(p), SHMRING_OK);
                    assert_eq!(
                        shmring_producer_send(p, bytes.as_ptr(), bytes.len(), &meta),
                        SHMRING_OK
                    );
                } else {
                    assert_eq!(shmring_producer_commit(p, &meta), SHMRING_OK);
                }
                // A bounded wait (not 0): an aborted claim may precede the record.
                let mut f = std::mem::zeroed::<shmring_frame>();
                assert_eq!(shmring_consumer_next(c, 1_000_000_000, &mut f), SHMRING_OK);
                assert_eq!(shmring_consumer_release(c, &f), SHMRING_OK);
                frames += 1;
            }
        });
        assert_eq!(frames, 2000);
        assert_eq!(n, 0, "the hot path allocated {n} times");

        // Failure paths: the C ABI's own messages use a fixed buffer; what the core
        // allocates for its error values is reported, not asserted (see SANDBOX.md).
        let mut r = std::mem::zeroed::<shmring_reservation>();
        let n = allocations(|| {
            assert_eq!(
                shmring_producer_reserve(ptr::null_mut(), 8, &mut r),
                SHMRING_ERR_NULL
            );
            assert_eq!(
                shmring_producer_commit(p, &std::mem::zeroed()),
                SHMRING_ERR_STATE
            );
        });
        assert_eq!(n, 0, "ABI-level errors allocated {n} times");
        assert_eq!(
            shmring_producer_set_policy(p, SHMRING_POLICY_FAIL, 0),
            SHMRING_OK
        );
        let mut held = Vec::with_capacity(64);
        let full = allocations(|| loop {
            match shmring_producer_reserve(p, 100_000, &mut r) {
                SHMRING_OK => {
                    let meta = std::mem::zeroed();
                    assert_eq!(shmring_producer_commit(p, &meta), SHMRING_OK);
                    let mut f = std::mem::zeroed::<shmring_frame>();
                    assert_eq!(shmring_consumer_next(c, 0, &mut f), SHMRING_OK);
                    held.push(f);
                }
                SHMRING_ERR_FULL => break,
                s => panic!("unexpected {s:?}"),
            }
        });
        eprintln!("allocations on the ring-full failure path: {full}");
        for f in &held {
            assert_eq!(shmring_consumer_release(c, f), SHMRING_OK);
        }
        assert_eq!(shmring_producer_close(p), SHMRING_OK);
        assert_eq!(shmring_consumer_close(c), SHMRING_OK);
        assert_eq!(shmring_segment_close(seg), SHMRING_OK);
    }
}
