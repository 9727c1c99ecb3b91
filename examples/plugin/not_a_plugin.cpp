// SPDX-License-Identifier: Apache-2.0
// A shared library without MLAROPE_PLUGIN_ENTRY: `--backend plugin:` must refuse it by name.
extern "C" int not_an_mlarope_plugin(void) { return 0; }
