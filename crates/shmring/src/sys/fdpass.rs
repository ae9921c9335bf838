//! Handing a segment's memfd (and an eventfd) to another process over a Unix
//! socket with `SCM_RIGHTS`.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// The most descriptors one message carries.
pub const MAX_FDS: usize = 4;

/// Sends `fds` (at most [`MAX_FDS`]) with a one-byte message.
pub fn send_fds(sock: impl AsFd, fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
    if fds.is_empty() || fds.len() > MAX_FDS {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "send_fds: between 1 and {MAX_FDS} descriptors, got {}",
                fds.len()
            ),
        ));
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    if !cmsg.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::other(
            "send_fds: ancillary buffer too small",
        ));
    }
    sendmsg(sock, &[IoSlice::new(b"S")], &mut cmsg, SendFlags::NOSIGNAL)?;
    Ok(())
}

/// Receives the descriptors of one message sent by [`send_fds`].
pub fn recv_fds(sock: impl AsFd) -> std::io::Result<Vec<OwnedFd>> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let r = recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut byte)],
        &mut cmsg,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    if r.bytes == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "recv_fds: peer closed the socket before sending descriptors",
        ));
    }
    let mut out = Vec::new();
    for msg in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = msg {
            out.extend(fds);
        }
    }
    if out.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "recv_fds: message carried no descriptors",
        ));
    }
    Ok(out)
}
