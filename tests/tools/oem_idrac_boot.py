"""Ironic's virtual media boot request, made by Ironic's own Dell library.

sushy-oem-idrac's ``set_virtual_boot_device`` (what Ironic's ``idrac``
virtual media boot calls) against the iDRAC at BMC_URL: it imports a
configuration that makes the virtual CD the one-time boot device, and on
LC068 (values pending or a configuration job in progress) power-cycles
the server and retries. Exits 0 when the import was taken.

Sleeps are shortened so a power-cycle-and-retry path plays out in seconds;
what the library sends is unchanged.
"""

import os
import sys
import time

import sushy
from sushy import auth

_sleep = time.sleep
time.sleep = lambda s: _sleep(min(s, 0.05))


def main():
    url = os.environ["BMC_URL"]
    conn = sushy.Sushy(
        url + "/redfish/v1/",
        auth=auth.BasicAuth(os.environ["BMC_USERNAME"], os.environ["BMC_PASSWORD"]),
        verify=False,
    )
    manager = conn.get_manager("/redfish/v1/Managers/iDRAC.Embedded.1")
    system = conn.get_system("/redfish/v1/Systems/System.Embedded.1")
    oem = manager.get_oem_extension("Dell")
    oem.set_virtual_boot_device(
        sushy.VIRTUAL_MEDIA_CD, persistent=False, manager=manager, system=system
    )
    print("virtual media boot set")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # the test reads the reason
        print("failed: %s: %s" % (type(e).__name__, e))
        sys.exit(1)
