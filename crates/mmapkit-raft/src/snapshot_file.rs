//! openraft's snapshot data for the KV state machine: a file, or one
//! still to be written from a read transaction when it is first read.
//!
//! A built snapshot is a consistent cut (one redb read transaction) and
//! nothing more: openraft keeps only its meta, so no state of gigabytes
//! is copied every few thousand entries (each copy's writes stalled the
//! log's syncs behind them). The file is written only when a follower
//! needs it: at the first seek or read of the data (openraft's sender
//! first seeks to the end for the size), on a blocking thread, and
//! removed with the last descriptor.

use std::future::Future;
use std::io::{self, SeekFrom};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};
use tokio::task::JoinHandle;

use crate::snapshot::Pacer;

/// Writes the file of a cut (at its start when given back).
pub(crate) type Writer = Box<dyn FnOnce() -> io::Result<std::fs::File> + Send>;

/// A snapshot's bytes (see the module's doc).
pub struct SnapshotFile {
    state: State,
    /// A seek asked for before the file was written.
    seek: Option<SeekFrom>,
    /// A file being received: its descriptor again, to start the
    /// writeback of what the transfer wrote (see [`Pacer`]).
    received: Option<(std::fs::File, Pacer)>,
}

enum State {
    Ready(tokio::fs::File),
    Pending(Option<Writer>),
    Writing(JoinHandle<io::Result<std::fs::File>>),
}

impl SnapshotFile {
    /// The file a snapshot is received into, written front to back.
    pub(crate) fn receiving(file: std::fs::File) -> io::Result<SnapshotFile> {
        let again = file.try_clone()?;
        Ok(SnapshotFile {
            state: State::Ready(tokio::fs::File::from_std(file)),
            seek: None,
            received: Some((again, Pacer::default())),
        })
    }

    /// Data that `write` produces when first read.
    pub(crate) fn pending(write: Writer) -> SnapshotFile {
        SnapshotFile { state: State::Pending(Some(write)), seek: None, received: None }
    }

    /// The file, written first if it was not yet.
    pub(crate) async fn into_std(mut self) -> io::Result<std::fs::File> {
        std::future::poll_fn(|cx| self.poll_written(cx)).await?;
        match self.state {
            State::Ready(f) => Ok(f.into_std().await),
            _ => unreachable!("poll_file leaves the file ready"),
        }
    }

    /// Drives the file to written (a no-op once it is).
    fn poll_written(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let next = match &mut self.state {
                State::Ready(_) => return Poll::Ready(Ok(())),
                State::Pending(w) => match w.take() {
                    Some(w) => State::Writing(tokio::task::spawn_blocking(w)),
                    None => return Poll::Ready(Err(io::Error::other("snapshot writer failed"))),
                },
                State::Writing(h) => match ready!(Pin::new(h).poll(cx)) {
                    Ok(Ok(f)) => State::Ready(tokio::fs::File::from_std(f)),
                    // Failed for good: later calls fail too.
                    Ok(Err(e)) => {
                        self.state = State::Pending(None);
                        return Poll::Ready(Err(e));
                    }
                    Err(e) => {
                        self.state = State::Pending(None);
                        return Poll::Ready(Err(io::Error::other(e)));
                    }
                },
            };
            self.state = next;
        }
    }

    fn poll_file(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<&mut tokio::fs::File>> {
        ready!(self.poll_written(cx))?;
        Poll::Ready(self.ready_file())
    }

    fn ready_file(&mut self) -> io::Result<&mut tokio::fs::File> {
        match &mut self.state {
            State::Ready(f) => Ok(f),
            _ => Err(io::Error::other("a built snapshot's data is read, never written")),
        }
    }
}

impl AsyncRead for SnapshotFile {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.seek.is_some() {
            ready!(Pin::new(&mut *me).poll_complete(cx))?;
        }
        let f = ready!(me.poll_file(cx))?;
        Pin::new(f).poll_read(cx, buf)
    }
}

impl AsyncSeek for SnapshotFile {
    fn start_seek(self: Pin<&mut Self>, pos: SeekFrom) -> io::Result<()> {
        let me = self.get_mut();
        match &mut me.state {
            State::Ready(f) => Pin::new(f).start_seek(pos),
            // Made once the file is written (`poll_complete`).
            _ => {
                me.seek = Some(pos);
                Ok(())
            }
        }
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        let me = self.get_mut();
        let pending = me.seek.take();
        let f = match me.poll_file(cx) {
            Poll::Ready(r) => r?,
            Poll::Pending => {
                me.seek = pending;
                return Poll::Pending;
            }
        };
        if let Some(pos) = pending {
            Pin::new(&mut *f).start_seek(pos)?;
        }
        Pin::new(f).poll_complete(cx)
    }
}

impl AsyncWrite for SnapshotFile {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let n = ready!(Pin::new(me.ready_file()?).poll_write(cx, buf))?;
        if let Some((file, pacer)) = &mut me.received {
            pacer.wrote(file, n);
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.get_mut().ready_file()?).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.get_mut().ready_file()?).poll_shutdown(cx)
    }
}
