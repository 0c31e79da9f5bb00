// Answering a modal QMessageBox from a test: a timer that runs inside the box's own event loop
// finds the box and clicks `button`.
#pragma once

#include <QApplication>
#include <QMessageBox>
#include <QPushButton>
#include <QTimer>

namespace odyssey::testing {

// Answers the next message box that opens with `button`; *answered says whether one did, and
// `text`, when given, receives what the box said.
inline void answer_next_box(QMessageBox::StandardButton button, bool* answered, QString* text = nullptr) {
  *answered = false;
  auto* timer = new QTimer(qApp);
  timer->setInterval(20);
  QObject::connect(timer, &QTimer::timeout, timer, [timer, button, answered, text] {
    for (QWidget* w : QApplication::topLevelWidgets()) {
      auto* box = qobject_cast<QMessageBox*>(w);
      if (!box || !box->isVisible() || !box->button(button)) continue;
      *answered = true;
      if (text) *text = box->text();
      timer->stop();  // deleteLater waits for the outer event loop; this box's loop must not see it again
      timer->deleteLater();
      box->button(button)->click();
      return;
    }
  });
  timer->start();
}

}  // namespace odyssey::testing
