//! `mmapkit-kv member ...`: the cluster's membership, listed and changed.

use super::*;

pub(super) async fn member(cmd: MemberCmd, patience: Duration) -> Result<i32, BoxError> {
    match cmd {
        MemberCmd::List { conn, json } => {
            let l = client(conn.nodes, conn.token)?.members(patience).await?;
            if json {
                println!("{}", serde_json::to_string(&l)?);
                return Ok(0);
            }
            let shown = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
            println!(
                "cluster {}, leader {}, last log index {} (as node {} sees it)",
                l.cluster.as_deref().unwrap_or("(none)"),
                shown(l.leader),
                shown(l.last_log_index),
                l.answered_by
            );
            println!("{:>6}  {:<22}  {:<7}  {:>10}  incarnation", "id", "addr", "role", "holds");
            for m in &l.members {
                let role = if m.voter { "voter" } else { "learner" };
                println!(
                    "{:>6}  {:<22}  {role:<7}  {:>10}  {:016x}",
                    m.id,
                    m.addr,
                    shown(m.matched),
                    m.incarnation
                );
            }
            Ok(0)
        }
        MemberCmd::Add { conn, id, addr } => {
            client(conn.nodes, conn.token)?.member_add(id, &addr, patience).await?;
            println!(
                "added node {id} ({addr}) as a learner; promote it: mmapkit-kv member promote {id}"
            );
            Ok(0)
        }
        MemberCmd::Promote { conn, id } => {
            client(conn.nodes, conn.token)?.member_promote(id, patience).await?;
            println!("node {id} is a voter");
            Ok(0)
        }
        MemberCmd::Remove { conn, id } => {
            client(conn.nodes, conn.token)?.member_remove(id, patience).await?;
            println!("removed node {id}");
            Ok(0)
        }
    }
}
