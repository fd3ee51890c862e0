//! `null-server`: answers 204 to every request on keep-alive HTTP/1.1
//! connections, on the same tokio + hyper stack as the generator. For the
//! `fanout` scenario it also serves the least an SSE fan-out can do: a GET
//! with `live=sse` gets an event stream, and each POST's body goes to every
//! open event stream as one data event and its control event, written from
//! every core, with nothing stored (the machine's fan-out ceiling).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Empty};
use hyper::body::{Body, Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::client::Error;

#[derive(clap::Args, Debug)]
pub struct NullArgs {
    /// Address to listen on, e.g. 127.0.0.1:4438
    #[arg(long, default_value = "127.0.0.1:4438")]
    listen: String,
}

/// The open event streams and the byte count that serves as their offset.
#[derive(Default)]
struct Hub {
    subscribers: Mutex<Vec<UnboundedSender<Bytes>>>,
    offset: AtomicU64,
}

impl Hub {
    fn control(&self) -> String {
        let at = self.offset.load(Ordering::Relaxed);
        format!(
            "event: control\ndata:{{\"streamNextOffset\":\"{at:020}\",\"streamCursor\":\"1\",\"upToDate\":true}}\n\n"
        )
    }

    fn subscribe(&self) -> Events {
        let (tx, rx) = unbounded_channel();
        self.subscribers.lock().expect("hub lock").push(tx);
        Events {
            first: Some(Bytes::from(self.control())),
            rx,
        }
    }

    /// Sends `body` (one line) to every open event stream.
    fn publish(&self, body: &[u8]) {
        let line = body.strip_suffix(b"\n").unwrap_or(body);
        self.offset.fetch_add(body.len() as u64, Ordering::Relaxed);
        let mut event = b"event: data\ndata:".to_vec();
        event.extend_from_slice(line);
        event.extend_from_slice(b"\n\n");
        event.extend_from_slice(self.control().as_bytes());
        let event = Bytes::from(event);
        let mut subscribers = self.subscribers.lock().expect("hub lock");
        subscribers.retain(|tx| tx.send(event.clone()).is_ok());
    }
}

/// One event stream's body: its first control event, then what is published.
struct Events {
    first: Option<Bytes>,
    rx: UnboundedReceiver<Bytes>,
}

impl Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        self.rx.poll_recv(cx).map(|e| e.map(|e| Ok(Frame::data(e))))
    }
}

type Reply = Response<Either<Empty<Bytes>, Events>>;

async fn answer(hub: Arc<Hub>, request: Request<Incoming>) -> Result<Reply, Infallible> {
    let sse = request
        .uri()
        .query()
        .is_some_and(|q| q.contains("live=sse"));
    if request.method() == Method::GET && sse {
        let mut response = Response::new(Either::Right(hub.subscribe()));
        let headers = response.headers_mut();
        headers.insert(
            "content-type",
            "text/event-stream".parse().expect("a header"),
        );
        return Ok(response);
    }
    let post = request.method() == Method::POST;
    // Read the body so the connection stays usable for the next request.
    let body = request.into_body().collect().await;
    if let (true, Ok(body)) = (post, body) {
        hub.publish(&body.to_bytes());
    }
    let mut response = Response::new(Either::Left(Empty::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

pub async fn run(args: NullArgs) -> Result<(), Error> {
    let listener = TcpListener::bind(&args.listen).await?;
    eprintln!(
        "rill-bench null-server on http://{}",
        listener.local_addr()?
    );
    let hub = Arc::new(Hub::default());
    let serve = async {
        loop {
            let (socket, _) = match listener.accept().await {
                Ok(pair) => pair,
                Err(e) => {
                    eprintln!("rill-bench null-server: accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = socket.set_nodelay(true);
            let hub = hub.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|r| answer(hub.clone(), r));
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(socket), service)
                    .await;
            });
        }
    };
    tokio::select! {
        _ = serve => {}
        _ = shutdown_signal() => {}
    }
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_sends_one_event_pair_to_every_open_stream_and_drops_closed_ones() {
        let hub = Hub::default();
        let mut kept = hub.subscribe();
        let gone = hub.subscribe();
        let first = kept.first.take().expect("a first control event");
        assert!(first.starts_with(b"event: control\ndata:{\"streamNextOffset\":\"000"));
        drop(gone);
        hub.publish(b"7,123\n");
        assert_eq!(hub.subscribers.lock().unwrap().len(), 1);
        let event = kept.rx.try_recv().expect("the published event");
        let text = std::str::from_utf8(&event).unwrap();
        assert!(
            text.starts_with("event: data\ndata:7,123\n\nevent: control\n"),
            "{text}"
        );
        assert!(
            text.contains("\"streamNextOffset\":\"00000000000000000006\""),
            "{text}"
        );
        assert!(text.ends_with("\"upToDate\":true}\n\n"), "{text}");
    }
}
