//! Which producer slot committed a record (`Segment::committed_by`, from the frame's
//! claim number while the frame is held) and whether a slot's producer is alive
//! (`Segment::producer_alive`): what a reader needs to hold each stream to the
//! producer that started it.

use shmring::{Address, Config, Consumer, ConsumerOptions, Meta};

#[test]
fn each_record_names_the_slot_that_committed_it() {
    let seg = Address::memfd("attribution", Config::with_capacity(1 << 20))
        .open()
        .unwrap();
    let consumer = seg.consumer().unwrap();
    let tethered = Consumer::tethered(seg.clone(), ConsumerOptions::default()).unwrap();
    while !tethered.adopted().unwrap() {
        assert!(consumer.try_next().unwrap().is_none());
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let mut a = seg.producer().unwrap();
    let mut b = seg.producer().unwrap();
    assert_ne!(a.slot(), b.slot());
    for i in 0..100u32 {
        let p = if i % 3 == 0 { &mut b } else { &mut a };
        p.send(&i.to_le_bytes(), Meta::new(i, 0)).unwrap();
    }
    for reader in [&consumer, &tethered] {
        for i in 0..100u32 {
            let f = reader.try_next().unwrap().expect("a record");
            assert_eq!(f.stream(), i);
            let want = if i % 3 == 0 { b.slot() } else { a.slot() };
            assert_eq!(seg.committed_by(f.seq()), Some(want), "record {i}");
        }
    }
    assert!(seg.producer_alive(a.slot()) && seg.producer_alive(b.slot()));
    let gone = a.slot();
    drop(a);
    assert!(!seg.producer_alive(gone));
    assert!(seg.producer_alive(b.slot()));
    assert!(!seg.producer_alive(seg.geometry().max_producers));
}
