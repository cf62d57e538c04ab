//! A TCP gate in front of a server, for outages: while shut it accepts connections and drops them at once
//! (the server looks down); while open it forwards bytes both ways. Threads, bounded by the test's life.
use std::io::ErrorKind;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub struct Gate {
    pub port: u16,
    open: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Gate {
    pub fn start(target_port: u16, open: bool) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let gate = Gate { port: listener.local_addr().unwrap().port(), open: Arc::new(AtomicBool::new(open)), stop: Arc::default() };
        let (is_open, stop) = (gate.open.clone(), gate.stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) if is_open.load(Ordering::Relaxed) => forward(client, target_port),
                    Ok((client, _)) => drop(client),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
                    Err(e) => panic!("gate: {e}"),
                }
            }
        });
        gate
    }

    pub fn open(&self) {
        self.open.store(true, Ordering::Relaxed);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn forward(client: TcpStream, target_port: u16) {
    client.set_nonblocking(false).unwrap();
    let Ok(server) = TcpStream::connect(("127.0.0.1", target_port)) else { return };
    let pipe = |mut from: TcpStream, mut to: TcpStream| {
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Write);
        })
    };
    pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
    pipe(server, client);
}
