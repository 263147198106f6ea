use std::io::Result as IoResult;
use std::io::{Read, Write};

use std::sync::mpsc::channel;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use std::mem;

pub struct SequentialReaderBuilder<R>
where
    R: Read + Send,
{
    inner: SequentialReaderBuilderInner<R>,
}

enum SequentialReaderBuilderInner<R>
where
    R: Read + Send,
{
    First(R),
    NotFirst(Receiver<R>),
}

pub struct SequentialReader<R>
where
    R: Read + Send,
{
    inner: SequentialReaderInner<R>,
    next: Sender<R>,
}

enum SequentialReaderInner<R>
where
    R: Read + Send,
{
    MyTurn(R),
    Waiting(Receiver<R>),
    Empty,
}

pub struct SequentialWriterBuilder<W>
where
    W: Write + Send,
{
    writer: Arc<Mutex<W>>,
    next_trigger: Option<Receiver<()>>,
}

pub struct SequentialWriter<W>
where
    W: Write + Send,
{
    trigger: Option<Receiver<()>>,
    writer: Arc<Mutex<W>>,
    on_finish: Sender<()>,
}

impl<R: Read + Send> SequentialReaderBuilder<R> {
    pub fn new(reader: R) -> SequentialReaderBuilder<R> {
        SequentialReaderBuilder {
            inner: SequentialReaderBuilderInner::First(reader),
        }
    }
}

impl<W: Write + Send> SequentialWriterBuilder<W> {
    pub fn new(writer: W) -> SequentialWriterBuilder<W> {
        SequentialWriterBuilder {
            writer: Arc::new(Mutex::new(writer)),
            next_trigger: None,
        }
    }
}

impl<R: Read + Send> Iterator for SequentialReaderBuilder<R> {
    type Item = SequentialReader<R>;

    fn next(&mut self) -> Option<SequentialReader<R>> {
        let (tx, rx) = channel();

        let inner = mem::replace(&mut self.inner, SequentialReaderBuilderInner::NotFirst(rx));

        match inner {
            SequentialReaderBuilderInner::First(reader) => Some(SequentialReader {
                inner: SequentialReaderInner::MyTurn(reader),
                next: tx,
            }),

            SequentialReaderBuilderInner::NotFirst(previous) => Some(SequentialReader {
                inner: SequentialReaderInner::Waiting(previous),
                next: tx,
            }),
        }
    }
}

impl<W: Write + Send> Iterator for SequentialWriterBuilder<W> {
    type Item = SequentialWriter<W>;
    fn next(&mut self) -> Option<SequentialWriter<W>> {
        let (tx, rx) = channel();
        let mut next_next_trigger = Some(rx);
        ::std::mem::swap(&mut next_next_trigger, &mut self.next_trigger);

        Some(SequentialWriter {
            trigger: next_next_trigger,
            writer: self.writer.clone(),
            on_finish: tx,
        })
    }
}

/// BATON PATCH 5: whose turn it is to read the stream (see [`SequentialReader::turn`]).
pub(crate) enum Turn<'a, R> {
    /// The stream is this reader's: the previous request released it.
    Mine(&'a mut R),
    /// A previous request (its body reader) still holds the stream.
    Pending,
    /// The previous reader vanished without handing the stream on; the connection is dead.
    Lost,
}

impl<R: Read + Send> SequentialReader<R> {
    /// BATON PATCH 5: waits up to `wait` for this reader's turn, without blocking forever as
    /// `read` does, so that one thread can watch many connections.
    pub(crate) fn turn(&mut self, wait: std::time::Duration) -> Turn<'_, R> {
        use std::sync::mpsc::RecvTimeoutError;
        if let SequentialReaderInner::Waiting(ref recv) = self.inner {
            match recv.recv_timeout(wait) {
                Ok(reader) => self.inner = SequentialReaderInner::MyTurn(reader),
                Err(RecvTimeoutError::Timeout) => return Turn::Pending,
                Err(RecvTimeoutError::Disconnected) => {
                    // Nothing will ever arrive: make `Drop` a no-op instead of a panic.
                    self.inner = SequentialReaderInner::Empty;
                    return Turn::Lost;
                }
            }
        }
        match self.inner {
            SequentialReaderInner::MyTurn(ref mut reader) => Turn::Mine(reader),
            SequentialReaderInner::Waiting(_) => Turn::Pending,
            SequentialReaderInner::Empty => Turn::Lost,
        }
    }
}

impl<R: Read + Send> Read for SequentialReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        let mut reader = match self.inner {
            SequentialReaderInner::MyTurn(ref mut reader) => return reader.read(buf),
            // BATON PATCH 5: a vanished predecessor is an error, not a panic.
            SequentialReaderInner::Waiting(ref mut recv) => recv.recv().map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "stream released")
            })?,
            SequentialReaderInner::Empty => unreachable!(),
        };

        let result = reader.read(buf);
        self.inner = SequentialReaderInner::MyTurn(reader);
        result
    }
}

impl<W: Write + Send> Write for SequentialWriter<W> {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        if let Some(v) = self.trigger.as_mut() {
            v.recv().unwrap()
        }
        self.trigger = None;

        self.writer.lock().unwrap().write(buf)
    }

    fn flush(&mut self) -> IoResult<()> {
        if let Some(v) = self.trigger.as_mut() {
            v.recv().unwrap()
        }
        self.trigger = None;

        self.writer.lock().unwrap().flush()
    }
}

impl<R> Drop for SequentialReader<R>
where
    R: Read + Send,
{
    fn drop(&mut self) {
        let inner = mem::replace(&mut self.inner, SequentialReaderInner::Empty);

        match inner {
            SequentialReaderInner::MyTurn(reader) => {
                self.next.send(reader).ok();
            }
            // BATON PATCH 5: never block. Dropped while a request in flight still holds the
            // stream (a connection handler dropping a connection that takes no further
            // request), the stream is closed when that request releases it, since nobody
            // receives it any more. Upstream blocked the dropping thread until then.
            SequentialReaderInner::Waiting(recv) => {
                if let Ok(reader) = recv.try_recv() {
                    self.next.send(reader).ok();
                }
            }
            SequentialReaderInner::Empty => (),
        }
    }
}

impl<W> Drop for SequentialWriter<W>
where
    W: Write + Send,
{
    fn drop(&mut self) {
        self.on_finish.send(()).ok();
    }
}
