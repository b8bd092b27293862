// The rendezvous store's interface is public (programs give their own, e.g. a
// PyTorch backend torch's store): lib/prism/store.hpp, installed as
// <prism/store.hpp>. This header is where lib/rendezvous's stores find it.
#pragma once

#include "prism/store.hpp"
