//! The collection of soft-deleted fork sources (PROTOCOL.md §4.2: a deleted
//! source with forks answers 410 until its forks are gone), in process: a
//! real shard 0 whose peer, shard 1, is played by the test, so a race's
//! messages arrive in the order the test picks.

mod inproc;

use std::rc::Rc;
use std::time::Duration;

use inproc::{TempDir, create, faulty, run, start_meshed};
use rill::shard::mesh::{Mesh, MeshMsg};
use rill::shard::{Shard, fork};

const SEGMENT_BYTES: u64 = 1 << 20;

/// Serves shard 0's own inbox as the shard's listener does its fork part.
fn serve_inbox(shard: &Rc<Shard>, inbox: flume::Receiver<MeshMsg>) {
    let shard = shard.clone();
    monoio::spawn(async move {
        while let Ok(msg) = inbox.recv_async().await {
            fork::handle_mesh(&shard, msg);
        }
    });
}

/// The next fork count shard 1 is asked for, answered with `forks`.
async fn count_on_peer(peer: &flume::Receiver<MeshMsg>, forks: usize) {
    match peer.recv_async().await {
        Ok(MeshMsg::ForkRefs { reply, .. }) => reply.send(forks).unwrap(),
        _ => panic!("shard 1 was asked something else"),
    }
}

/// Shard 1 counts the source's one fork, the fork is deleted, and its nudge
/// reaches shard 0 before the count does (its thread was descheduled, say):
/// the nudge finds the source live and does nothing, so the DELETE, which
/// soft-deletes on a count that is stale by then, must count again.
#[test]
fn a_nudge_that_overtakes_the_fork_count_is_not_lost() {
    let dir = TempDir::new("fork-nudge");
    run(async {
        let (storage, _) = faulty(&dir.0);
        let (own, own_inbox) = flume::unbounded();
        let (peer_tx, peer) = flume::unbounded();
        let mesh = Mesh::new(0, vec![own, peer_tx], Default::default());
        let shard = start_meshed(storage, SEGMENT_BYTES, mesh).await;
        serve_inbox(&shard, own_inbox);
        shard.submit(vec![create("src")]).await.unwrap();
        let id = shard.table.borrow().get("src").expect("created").id;
        let deleting = monoio::spawn({
            let shard = shard.clone();
            async move { fork::delete(&shard, "src").await.status }
        });
        let Ok(MeshMsg::ForkRefs { reply, .. }) = peer.recv_async().await else {
            panic!("the DELETE counts the forks on shard 1");
        };
        let nudge = MeshMsg::ForkReleased {
            source: "src".to_string(),
            source_id: id,
        };
        fork::handle_mesh(&shard, nudge);
        monoio::time::sleep(Duration::from_millis(50)).await;
        reply.send(1).unwrap();
        drop(reply);
        // Any count from here on finds the fork gone.
        let answering = monoio::spawn(async move {
            loop {
                count_on_peer(&peer, 0).await;
            }
        });
        assert_eq!(deleting.await, 204);
        assert!(
            shard.table.borrow().get("src").is_none(),
            "the source is deleted, not left soft-deleted for a cleaner pass"
        );
        drop(answering);
    });
}
