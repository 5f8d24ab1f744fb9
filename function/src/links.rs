//! The node network's links: the NIC, or a bond of NICs, optionally a
//! VLAN on it, and their MTU (`bootInterface`, `bond`, `vlan`, `mtu` on
//! `spec.host` and each worker pool), read into typed values.
//!
//! The OS names the links as cloud-init's `network_data.json` converter
//! does (cloud-init 22.4, which the lab runs, and later): NICs by the
//! `name` of their link (renamed by MAC), the one bond `bond0` whatever
//! the link says (it numbers bonds itself), a VLAN `<link>.<id>`. The data
//! interface, which carries the node address and which kube-vip and
//! Cilium's L2 announcements use, is named the same way here.

use serde_json::Value;

use crate::api;
use crate::decode::Problems;
use crate::validate;

/// What cloud-init calls the node's one bond.
pub const BOND_NAME: &str = "bond0";
/// Linux interface names: at most 15 characters (IFNAMSIZ - 1).
pub const MAX_IFNAME: usize = 15;
pub const MTU_RANGE: std::ops::RangeInclusive<i64> = 1280..=9000;

#[derive(Clone, Debug, PartialEq)]
pub struct NodeLink {
    /// The NIC the host boots from and inspection names.
    pub boot: String,
    pub bond: Option<Bond>,
    pub vlan: Option<u16>,
    pub mtu: Option<u16>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Bond {
    pub interfaces: Vec<String>,
    pub mode: api::BondMode,
}

impl NodeLink {
    pub fn nic(boot: &str) -> Self {
        Self {
            boot: boot.to_string(),
            bond: None,
            vlan: None,
            mtu: None,
        }
    }

    /// The NICs the node network uses.
    pub fn nics(&self) -> Vec<&str> {
        match &self.bond {
            Some(b) => b.interfaces.iter().map(String::as_str).collect(),
            None => vec![&self.boot],
        }
    }

    /// The link a VLAN sits on: the bond, else the NIC.
    pub fn base(&self) -> &str {
        if self.bond.is_some() {
            BOND_NAME
        } else {
            &self.boot
        }
    }

    /// Where the node address goes, as the OS names it.
    pub fn data_interface(&self) -> String {
        match self.vlan {
            Some(v) => format!("{}.{v}", self.base()),
            None => self.base().to_string(),
        }
    }
}

/// The four fields as the API has them, on `spec.host` or a pool.
pub struct Fields<'a> {
    pub boot: Option<&'a str>,
    pub bond: Option<&'a api::BondSpec>,
    pub vlan: Option<i64>,
    pub mtu: Option<i64>,
}

impl Fields<'_> {
    pub fn is_empty(&self) -> bool {
        self.boot.is_none() && self.bond.is_none() && self.vlan.is_none() && self.mtu.is_none()
    }
}

/// Reads the fields at `at` (`spec.host`, `spec.workers[1]`); `boot` is
/// already defaulted. Every problem is recorded, each by its path.
pub fn parse(p: &mut Problems, at: &str, f: &Fields) -> Option<NodeLink> {
    let path = |s: &str| format!("{at}.{s}");
    let boot = match f.boot {
        Some(b) => p
            .non_empty(&path("bootInterface"), b)
            .and_then(|b| p.valid(&path("bootInterface"), b, validate::interface_name)),
        None => {
            p.fail(&path("bootInterface"), None, "is required");
            None
        }
    };
    let bond = f
        .bond
        .and_then(|b| parse_bond(p, &path("bond"), b, boot.as_deref()));
    let vlan = match f.vlan {
        None => Some(None),
        Some(v) if (1..=4094).contains(&v) => Some(Some(v as u16)),
        Some(v) => {
            p.fail(
                &path("vlan"),
                Some(&Value::from(v)),
                "must be a VLAN id between 1 and 4094",
            );
            None
        }
    };
    let mtu = match f.mtu {
        None => Some(None),
        Some(m) if MTU_RANGE.contains(&m) => Some(Some(m as u16)),
        Some(m) => {
            p.fail(
                &path("mtu"),
                Some(&Value::from(m)),
                "must be between 1280 (IPv6's minimum) and 9000 (the most CAPM3 v1.13's Metal3DataTemplate takes)",
            );
            None
        }
    };
    let link = NodeLink {
        boot: boot?,
        bond: if f.bond.is_some() { Some(bond?) } else { None },
        vlan: vlan?,
        mtu: mtu?,
    };
    let data = link.data_interface();
    if data.len() > MAX_IFNAME {
        p.fail(
            &path("vlan"),
            link.vlan.map(Value::from).as_ref(),
            format!(
                "makes the VLAN interface {data}, longer than Linux's {MAX_IFNAME} characters: use a shorter bootInterface or a bond"
            ),
        );
        return None;
    }
    Some(link)
}

fn parse_bond(p: &mut Problems, at: &str, b: &api::BondSpec, boot: Option<&str>) -> Option<Bond> {
    let at_if = format!("{at}.interfaces");
    let mut ok = true;
    if !(2..=8).contains(&b.interfaces.len()) {
        p.fail(
            &at_if,
            Some(&Value::from(b.interfaces.clone())),
            "must list 2 to 8 NICs: a bond of one is no redundancy",
        );
        ok = false;
    }
    for (i, n) in b.interfaces.iter().enumerate() {
        let item = format!("{at_if}[{i}]");
        if p.valid(&item, n, validate::interface_name).is_none() {
            ok = false;
        }
        if let Some(j) = b.interfaces[..i].iter().position(|o| o == n) {
            p.fail(
                &item,
                Some(&Value::String(n.clone())),
                format!("is also {at_if}[{j}]: each NIC once"),
            );
            ok = false;
        }
        if n == BOND_NAME {
            p.fail(
                &item,
                Some(&Value::String(n.clone())),
                "is the bond's own name",
            );
            ok = false;
        }
    }
    if let Some(boot) = boot
        && !b.interfaces.iter().any(|n| n == boot)
    {
        let boot_path = at.trim_end_matches(".bond").to_string() + ".bootInterface";
        p.fail(
            &boot_path,
            Some(&Value::String(boot.to_string())),
            format!("must be one of {at_if}: the host boots and is inspected through it, and the bond takes its MAC address"),
        );
        ok = false;
    }
    ok.then(|| Bond {
        interfaces: b.interfaces.clone(),
        mode: b.mode,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_interface_is_named_as_cloud_init_names_it() {
        let mut l = NodeLink::nic("eno1");
        assert_eq!(l.data_interface(), "eno1");
        l.vlan = Some(100);
        assert_eq!(l.data_interface(), "eno1.100");
        l.bond = Some(Bond {
            interfaces: vec!["eno1".into(), "eno2".into()],
            mode: api::BondMode::Lacp,
        });
        assert_eq!(l.data_interface(), "bond0.100");
        assert_eq!(l.nics(), ["eno1", "eno2"]);
    }
}
