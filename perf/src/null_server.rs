//! `null-server`: answers 204 to every request on keep-alive HTTP/1.1
//! connections, on the same tokio + hyper stack as the generator.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::client::Error;

#[derive(clap::Args, Debug)]
pub struct NullArgs {
    /// Address to listen on, e.g. 127.0.0.1:4438
    #[arg(long, default_value = "127.0.0.1:4438")]
    listen: String,
}

async fn answer(request: Request<Incoming>) -> Result<Response<Empty<Bytes>>, Infallible> {
    // Read the body so the connection stays usable for the next request.
    let _ = request.into_body().collect().await;
    let mut response = Response::new(Empty::new());
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

pub async fn run(args: NullArgs) -> Result<(), Error> {
    let listener = TcpListener::bind(&args.listen).await?;
    eprintln!(
        "rill-bench null-server on http://{}",
        listener.local_addr()?
    );
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
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(socket), hyper::service::service_fn(answer))
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
