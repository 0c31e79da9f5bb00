// Run work on the global thread pool and deliver its result on the GUI thread, to a
// receiver that may have been deleted meanwhile (then the result is dropped). Callers
// drop stale results themselves with a generation counter.
#pragma once

#include <QCoreApplication>
#include <QMetaObject>
#include <QObject>
#include <QPointer>
#include <QThreadPool>
#include <memory>
#include <utility>

namespace odyssey::ui {

template <typename Work, typename Then>
void run_off_gui_thread(QObject* receiver, Work work, Then then) {
  QPointer<QObject> guard(receiver);
  auto shared_then = std::make_shared<Then>(std::move(then));
  QThreadPool::globalInstance()->start([guard, work, shared_then]() {
    auto result = std::make_shared<decltype(work())>(work());
    QMetaObject::invokeMethod(
        QCoreApplication::instance(),
        [guard, shared_then, result]() {
          if (guard) (*shared_then)(std::move(*result));
        },
        Qt::QueuedConnection);
  });
}

}  // namespace odyssey::ui
