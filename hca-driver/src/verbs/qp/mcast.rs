//! Multicast groups of UD QPs (`ibv_attach_mcast`, `ibv_detach_mcast`):
//! ATTACH_TO_MCG and DETACH_FROM_MCG.

use firmware_cmds::mcg::{AttachToMcgIn, AttachToMcgOut, DetachFromMcgIn, DetachFromMcgOut};

use super::*;
use crate::verbs::Gid;

impl<P: Platform + 'static, S: Share> Qp<P, S> {
    /// Checks the arguments of [`attach_mcast`](Self::attach_mcast) and
    /// [`detach_mcast`](Self::detach_mcast).
    fn mcast_args(&self, gid: &Gid, lid: u16) -> Result<()> {
        if self.qp_type != QpType::Ud {
            return Err(Error::InvalidArgument {
                arg: "qp",
                reason: "only UD QPs join multicast groups",
            });
        }
        if gid.0[0] != 0xff {
            return Err(Error::InvalidAttribute {
                attr: "gid",
                value: u64::from(gid.0[0]),
                reason: "a multicast GID (MGID) starts with 0xff",
            });
        }
        // InfiniBand multicast LIDs are 0xc000 ..= 0xfffe; on Ethernet the
        // LID is not used (0).
        if lid != 0 && !(0xc000..=0xfffe).contains(&lid) {
            return Err(Error::InvalidAttribute {
                attr: "lid",
                value: u64::from(lid),
                reason: "a multicast LID is 0xc000 ..= 0xfffe (or 0 on Ethernet)",
            });
        }
        Ok(())
    }

    /// Attaches the UD QP to the multicast group `gid` (`ibv_attach_mcast`,
    /// ATTACH_TO_MCG): UD sends to the group (DQPN 0xffffff, the MGID as
    /// destination GID) are received by it. `lid` is the group's multicast
    /// LID on InfiniBand (the device takes only the MGID) and 0 on Ethernet.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a QP that is not UD;
    /// [`Error::InvalidAttribute`] for a GID that is not a multicast one
    /// or a LID outside the multicast range; [`Error::Command`] when the
    /// device refuses (the QP already attached to the group).
    pub fn attach_mcast(&self, gid: &Gid, lid: u16) -> Result<()> {
        self.mcast_args(gid, lid)?;
        let input = AttachToMcgIn::new()
            .with(AttachToMcgIn::qpn, self.qpn.0)?
            .with(AttachToMcgIn::multicast_gid, gid.0)?;
        let hca = self.pd.context().hca();
        let _: AttachToMcgOut = hca.exec(&input)?;
        Ok(())
    }

    /// Detaches the QP from the multicast group `gid` (`ibv_detach_mcast`,
    /// DETACH_FROM_MCG).
    ///
    /// # Errors
    ///
    /// As [`attach_mcast`](Self::attach_mcast); [`Error::Command`] when
    /// the QP is not attached to the group.
    pub fn detach_mcast(&self, gid: &Gid, lid: u16) -> Result<()> {
        self.mcast_args(gid, lid)?;
        let input = DetachFromMcgIn::new()
            .with(DetachFromMcgIn::qpn, self.qpn.0)?
            .with(DetachFromMcgIn::multicast_gid, gid.0)?;
        let hca = self.pd.context().hca();
        let _: DetachFromMcgOut = hca.exec(&input)?;
        Ok(())
    }
}
